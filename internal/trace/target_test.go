// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tcpdoctor/tcpdoctor/internal/netns"
	"github.com/tcpdoctor/tcpdoctor/internal/selector"
	"github.com/tcpdoctor/tcpdoctor/internal/snapshot"
)

// TestTarget: --pod alone is the pod's namespace, whole; --container is
// its processes, sorted, in the pod's namespace or, for a pod on the
// host's network, the namespace of its first process; no process is an
// error naming what was asked.
func TestTarget(t *testing.T) {
	sandbox := &snapshot.Workload{Pod: "web-1", PodNamespace: "shop", Sandbox: true}
	api := snapshot.Workload{Container: "api", Pod: "web-1", PodNamespace: "shop"}
	nss := []netns.NS{{Name: "host", Path: "/proc/1/ns/net"}, {Name: "shop/web-1", Path: "/run/netns/x", Workload: sandbox}}
	byPid := map[int]snapshot.Workload{30: api, 20: api, 40: {Container: "db", Pod: "db-0", PodNamespace: "shop"}}
	byPidNS := func(pid int) (netns.NS, error) {
		return netns.NS{Name: "pid", Path: "/proc/" + strconv.Itoa(pid) + "/ns/net"}, nil
	}

	var o LiveOptions
	if err := o.Target(&selector.Selector{Pod: "shop/web-1"}, nss, byPid, byPidNS); err != nil || o.NS.Name != "shop/web-1" || o.Pids != nil || o.Workload != sandbox {
		t.Errorf("--pod: %v %+v", err, o)
	}
	o = LiveOptions{}
	if err := o.Target(&selector.Selector{Pod: "shop/web-1", Container: "api"}, nss, byPid, byPidNS); err != nil ||
		o.NS.Name != "shop/web-1" || !slices.Equal(o.Pids, []int{20, 30}) || o.Workload == nil || o.Workload.Container != "api" {
		t.Errorf("--container: %v %+v", err, o)
	}
	o = LiveOptions{}
	if err := o.Target(&selector.Selector{Container: "db"}, nss[:1], byPid, byPidNS); err != nil ||
		o.NS.Path != "/proc/40/ns/net" || !slices.Equal(o.Pids, []int{40}) || o.Workload.Container != "db" {
		t.Errorf("on the host's network: %v %+v", err, o)
	}
	o = LiveOptions{}
	if err := o.Target(&selector.Selector{Container: "cache"}, nss, byPid, byPidNS); err == nil || !strings.Contains(err.Error(), "no process to trace") {
		t.Errorf("no process: %v", err)
	}
	o = LiveOptions{}
	gone := errors.New("gone")
	if err := o.Target(&selector.Selector{Container: "db"}, nss[:1], byPid, func(int) (netns.NS, error) { return netns.NS{}, gone }); !errors.Is(err, gone) {
		t.Errorf("namespace not found: %v", err)
	}
}
