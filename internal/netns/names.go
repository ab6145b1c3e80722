package netns

import "time"

// Names names namespaces by inode for a stream of events, looking again
// (at most once a second) when asked for one created since. A namespace
// of a process this one may not inspect has no name.
type Names struct {
	Find Finder
	// Now is the clock that spaces the looks.
	Now    func() time.Time
	byIno  map[uint64]string
	looked time.Time
}

// Refresh looks for every namespace now. With an error the names found
// are kept (a partial list).
func (n *Names) Refresh() error {
	n.looked = n.Now()
	all, err := n.Find.All()
	m := make(map[uint64]string, len(all))
	for _, ns := range all {
		m[ns.Inode] = ns.Name
	}
	n.byIno = m
	return err
}

// Of returns the name of the namespace with inode ino, looking again when
// it is unknown and the last look is a second old.
func (n *Names) Of(ino uint64) (string, bool) {
	name, ok := n.byIno[ino]
	if !ok && ino != 0 && n.Now().Sub(n.looked) >= time.Second {
		_ = n.Refresh() // a partial list still names what it can
		name, ok = n.byIno[ino]
	}
	return name, ok
}

// Inode returns the inode of the namespace named name, as last looked.
func (n *Names) Inode(name string) (uint64, bool) {
	for ino, nm := range n.byIno {
		if nm == name {
			return ino, true
		}
	}
	return 0, false
}
