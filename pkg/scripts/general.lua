-- general.lua: opens define_general, which defines the general way of
-- deciding a descriptor -- every file from here to the top of batch.lua,
-- whose locals are define_general's -- and sets decide_general. Run with
-- EVALSHA, the script defines those functions only in a call that needs
-- them (one the window path does not decide), since each closure a script
-- defines costs Redis CPU on every call; loaded as a function library, on
-- the first such call after the library loads, and never again. Part of
-- the decide script (see decide.lua).

local decide_general -- set by define_general
local function define_general()
