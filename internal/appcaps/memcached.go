package appcaps

import (
	"fmt"
	"strconv"
	"strings"
)

// memcachedDefaultConns is memcached's compiled-in -c.
const memcachedDefaultConns = 1024

// memcachedConns reads memcached's connection limit from its command line
// (memcached keeps it whole: Debian's start-memcached turns
// /etc/memcached.conf into these options): -c N, -cN, --conn-limit=N or
// --conn-limit N, else the default.
func memcachedConns(argv []string) (int64, string, error) {
	v, src := "", ""
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-c" || a == "--conn-limit":
			if i+1 < len(argv) {
				i++
				v, src = argv[i], "command line "+a
			}
		case strings.HasPrefix(a, "--conn-limit="):
			v, src = strings.TrimPrefix(a, "--conn-limit="), "command line --conn-limit"
		case strings.HasPrefix(a, "-c") && len(a) > 2 && !strings.HasPrefix(a, "--"):
			v, src = a[2:], "command line -c"
		}
	}
	if v == "" {
		return memcachedDefaultConns, "default (no -c on the command line)", nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, "", fmt.Errorf("%s %q is not a positive number", src, v)
	}
	return n, src, nil
}
