// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestEncodingJSONSeesKeptTCPInfo: encoding/json writes the tcp_info of
// sockets a Store kept (read from a file), byte for byte the line the
// writer wrote, and reads it back into sockets a Store can keep again.
func TestEncodingJSONSeesKeptTCPInfo(t *testing.T) {
	buf := written(t, sample())
	line := strings.Split(buf.String(), "\n")[1]
	got, err := ReadAll(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(got[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != line {
		t.Fatalf("encoding/json of the sockets read back:\n got %s\nwant %s", b, line)
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(line), &s); err != nil {
		t.Fatal(err)
	}
	var st Store
	for i := range s.Sockets {
		s.Sockets[i] = st.Keep(&s.Sockets[i])
	}
	if b, _ = json.Marshal(&s); string(b) != line {
		t.Fatalf("encoding/json round trip through a Store:\n got %s\nwant %s", b, line)
	}
}

// TestTCPInfoJSONMatchesReflection: the hand encoder writes any tcp_info
// as encoding/json's reflection does.
func TestTCPInfoJSONMatchesReflection(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		ti := randInfo(rng, &TCPInfo{})
		ti.DeliveryRateAppLimited = rng.IntN(2) == 0 // one byte: 0 or 1
		want, err := json.Marshal(&ti)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendTCPInfoJSON(nil, &ti); !bytes.Equal(got, want) {
			t.Fatalf("hand encoder:\n got %s\nwant %s", got, want)
		}
	}
}

// TestSocketDecodeErrorNames: a socket field of the wrong type is named
// as decoding a Socket names it.
func TestSocketDecodeErrorNames(t *testing.T) {
	for _, c := range []struct{ sock, want string }{
		{`{"uid":"x"}`, "Go struct field Socket.uid of type uint32"},
		{`{"tcp_info":{"rtt":"x"}}`, "Go struct field TCPInfo.tcp_info.rtt of type uint32"},
		{`{"mem":{"rcvbuf":"x"}}`, "Go struct field MemInfo.mem.rcvbuf of type uint32"},
	} {
		in := `{"format":"tcpdoctor-snapshot","version":1}` + "\n" + `{"taken":"2026-11-22T05:00:00Z","sockets":[` + c.sock + "]}\n"
		_, err := ReadAll(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.sock, err, c.want)
		}
	}
}

// FuzzTCPRefJSON: encoding/json reads any bytes into a TCPRef as into a
// *TCPInfo (both fail or neither), and writes it back the same, packed by
// a Store or not.
func FuzzTCPRefJSON(f *testing.F) {
	f.Add([]byte(`null`))
	f.Add([]byte(`{"len":248,"rtt":20000,"snd_cwnd":10,"delivery_rate_app_limited":true}`))
	f.Add([]byte(`{"RTT":1,"rtt":2,"bytes_acked":18446744073709551615}`))
	f.Add([]byte(`{"rtt":"x"}`))
	f.Add([]byte(`7`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r TCPRef
		var p *TCPInfo
		errR, errP := json.Unmarshal(b, &r), json.Unmarshal(b, &p)
		if (errR == nil) != (errP == nil) {
			t.Fatalf("TCPRef err %v, *TCPInfo err %v", errR, errP)
		}
		if errR != nil {
			return
		}
		want, _ := json.Marshal(p)
		got, err := json.Marshal(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("TCPRef wrote %s (%v), *TCPInfo %s", got, err, want)
		}
		var st Store
		kept := st.Keep(&Socket{Info: r})
		if got, _ = json.Marshal(kept.Info); !bytes.Equal(got, want) {
			t.Fatalf("packed TCPRef wrote %s, *TCPInfo %s", got, want)
		}
	})
}
