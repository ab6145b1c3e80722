// SPDX-License-Identifier: Apache-2.0

package appcaps

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Tomcat's defaults for a Connector (NIO, Tomcat 8.5 to 11).
const (
	tomcatDefaultMaxConnections = 8192
	tomcatDefaultMaxThreads     = 200
	tomcatDefaultAcceptCount    = 100
)

// tomcatConnector is one <Connector> of server.xml with its settings.
type tomcatConnector struct {
	port                    uint16
	maxConnections          setting
	maxThreads, acceptCount setting
	protocol                string
	unlimited               bool // maxConnections -1
}

// catalinaBase reads -Dcatalina.base= from a java command line; "" when
// it is not Tomcat's.
func catalinaBase(argv []string) string {
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, "-Dcatalina.base="); ok {
			return v
		}
	}
	return ""
}

// parseTomcat reads the Connectors of server.xml (file names it in
// messages). Executors give maxThreads to the Connectors that name them.
// A port or value written as a ${property} cannot be read: the Connector
// is left out.
func parseTomcat(b []byte, file string) ([]tomcatConnector, error) {
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	// The offset before a token is where it starts: its line, counted
	// on from the last line asked for (offsets only grow), so the
	// newlines are counted once in all.
	var off int64
	seen, lines := 0, 1
	line := func() int {
		to := min(int(off), len(b))
		if to > seen {
			lines += bytes.Count(b[seen:to], []byte{'\n'})
			seen = to
		}
		return lines
	}
	executors := map[string]setting{}
	type pending struct {
		c        tomcatConnector
		executor string
	}
	var cs []pending
	depth := 0
	for {
		off = dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth++; depth > 64 {
				return nil, fmt.Errorf("%s: elements nested deeper than 64", file)
			}
			attr := func(name string) (string, bool) {
				for _, a := range t.Attr {
					if a.Name.Local == name {
						return a.Value, true
					}
				}
				return "", false
			}
			at := fmt.Sprintf("%s:%d", file, line())
			switch t.Name.Local {
			case "Executor":
				name, _ := attr("name")
				if v, ok := attr("maxThreads"); ok {
					executors[name] = setting{value: v, source: at + " (Executor " + name + ")"}
				} else {
					executors[name] = setting{value: strconv.Itoa(tomcatDefaultMaxThreads), source: "default (Executor " + name + ")"}
				}
			case "Connector":
				ps, _ := attr("port")
				port, err := strconv.ParseUint(ps, 10, 16)
				if err != nil || port == 0 {
					continue // ${port.http} or none
				}
				c := tomcatConnector{port: uint16(port),
					maxConnections: setting{value: strconv.Itoa(tomcatDefaultMaxConnections), source: "default (no maxConnections on the Connector at " + at + ")"},
					maxThreads:     setting{value: strconv.Itoa(tomcatDefaultMaxThreads), source: "default"},
					acceptCount:    setting{value: strconv.Itoa(tomcatDefaultAcceptCount), source: "default"}}
				c.protocol, _ = attr("protocol")
				if v, ok := attr("maxConnections"); ok {
					c.maxConnections = setting{value: v, source: at}
					c.unlimited = v == "-1"
				}
				if v, ok := attr("maxThreads"); ok {
					c.maxThreads = setting{value: v, source: at}
				}
				if v, ok := attr("acceptCount"); ok {
					c.acceptCount = setting{value: v, source: at}
				}
				ex, _ := attr("executor")
				cs = append(cs, pending{c, ex})
			}
		case xml.EndElement:
			depth--
		}
	}
	var out []tomcatConnector
	for _, p := range cs {
		if s, ok := executors[p.executor]; ok && p.executor != "" {
			p.c.maxThreads = s
		}
		out = append(out, p.c)
	}
	return out, nil
}
