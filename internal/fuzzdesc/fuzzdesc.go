// Package fuzzdesc turns fuzz inputs into rate-limit descriptors, for the
// fuzz tests that need any domain, keys and values: length-prefixed
// strings, so any byte can appear anywhere. It knows nothing of how a
// descriptor is encoded or stored.
package fuzzdesc

// Decode reads data as strings, each a length byte then that many bytes
// (fewer when data ends first): the domain, then keys and values in turn.
// A key that data ends after has the value "". Empty data is the empty
// domain with no entries.
func Decode(data []byte) (domain string, entries [][2]string) {
	next := func() (string, bool) {
		if len(data) == 0 {
			return "", false
		}
		n := min(int(data[0]), len(data)-1)
		s := string(data[1 : 1+n])
		data = data[1+n:]
		return s, true
	}
	domain, _ = next()
	for {
		k, ok := next()
		if !ok {
			return domain, entries
		}
		v, _ := next()
		entries = append(entries, [2]string{k, v})
	}
}
