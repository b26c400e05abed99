package heapfloor

// Cycles returns how many times t adjusted the percentage.
func (t *Tuner) Cycles() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cycles
}
