package hitters

// occupied counts the index's occupied cells.
func (x *index) occupied() int {
	n := 0
	for _, c := range x.cells {
		if c.slot != 0 {
			n++
		}
	}
	return n
}
