// SPDX-License-Identifier: Apache-2.0

package snapshot

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends sk as one JSON object, byte for byte what
// encoding/json makes of it (the names, order, omitempty and escaping of
// its tags; internal/cli's sockets_json_test.go checks that on random
// sockets). Written by hand because reflection per field was most of
// the time of writing a million sockets.
func (sk *Socket) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	return append(sk.AppendJSONFields(b), '}')
}

// AppendJSONFields is AppendJSON without the braces, for an object that
// embeds a Socket.
func (sk *Socket) AppendJSONFields(b []byte) []byte {
	b = append(b, `"family":`...)
	b = strconv.AppendUint(b, uint64(sk.Family), 10)
	b = append(b, `,"state":`...)
	b = AppendJSONString(b, sk.State.String())
	b = append(b, `,"local":`...)
	b = appendJSONEndpoint(b, sk.Local)
	b = append(b, `,"remote":`...)
	b = appendJSONEndpoint(b, sk.Remote)
	if sk.Timer != 0 {
		b = appendUintField(b, `,"timer":`, uint64(sk.Timer))
	}
	if sk.Retrans != 0 {
		b = appendUintField(b, `,"retrans":`, uint64(sk.Retrans))
	}
	if v, ok := sk.Shutdown.Get(); ok {
		b = appendUintField(b, `,"shutdown":`, uint64(v))
	}
	if v, ok := sk.BufLock.Get(); ok {
		b = appendUintField(b, `,"buf_lock":`, uint64(v))
	}
	b = appendUintField(b, `,"recv_q":`, uint64(sk.RecvQ))
	b = appendUintField(b, `,"send_q":`, uint64(sk.SendQ))
	b = appendUintField(b, `,"uid":`, uint64(sk.UID))
	b = appendUintField(b, `,"inode":`, uint64(sk.Inode))
	b = appendUintField(b, `,"cookie":`, sk.Cookie)
	if sk.IfIndex != 0 {
		b = appendUintField(b, `,"ifindex":`, uint64(sk.IfIndex))
	}
	if sk.Expires != 0 {
		b = appendUintField(b, `,"expires_ms":`, uint64(sk.Expires))
	}
	if !sk.CC.IsZero() {
		b = append(b, `,"cc":`...)
		b = AppendJSONString(b, sk.CC.String())
	}
	b = append(b, `,"tcp_info":`...)
	var tb TCPInfo
	if ti := sk.TCP(&tb); ti != nil {
		b = appendTCPInfoJSON(b, ti)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"mem":`...)
	if m := sk.Mem; m != nil {
		b = appendUintField(b, `{"rmem_alloc":`, uint64(m.RmemAlloc))
		b = appendUintField(b, `,"rcvbuf":`, uint64(m.Rcvbuf))
		b = appendUintField(b, `,"wmem_alloc":`, uint64(m.WmemAlloc))
		b = appendUintField(b, `,"sndbuf":`, uint64(m.Sndbuf))
		b = appendUintField(b, `,"fwd_alloc":`, uint64(m.FwdAlloc))
		b = appendUintField(b, `,"wmem_queued":`, uint64(m.WmemQueued))
		b = appendUintField(b, `,"optmem":`, uint64(m.Optmem))
		b = appendUintField(b, `,"backlog":`, uint64(m.Backlog))
		b = appendUintField(b, `,"drops":`, uint64(m.Drops))
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	if sk.Pids.Len() > 0 {
		b = append(b, `,"pids":[`...)
		for i, p := range sk.Pids.List() {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(p), 10)
		}
		b = append(b, ']')
	}
	return b
}

// MarshalJSON writes the tcp_info r holds, or null: what encoding/json
// makes of a *TCPInfo.
func (r TCPRef) MarshalJSON() ([]byte, error) {
	var tb TCPInfo
	if t := r.get(&tb); t != nil {
		return appendTCPInfoJSON(nil, t), nil
	}
	return []byte("null"), nil
}

// UnmarshalJSON reads a tcp_info as encoding/json reads a *TCPInfo: null
// holds none, an object fills the TCPInfo r holds unpacked, else a new one.
func (r *TCPRef) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*r = TCPRef{}
		return nil
	}
	t := r.own()
	if t == nil {
		t = new(TCPInfo)
	}
	if err := json.Unmarshal(b, t); err != nil {
		return err
	}
	*r = TCPOf(t)
	return nil
}

func appendTCPInfoJSON(b []byte, t *TCPInfo) []byte {
	b = append(b, `{"len":`...)
	b = strconv.AppendInt(b, int64(t.Len), 10)
	b = appendUintField(b, `,"state":`, uint64(t.State))
	b = appendUintField(b, `,"ca_state":`, uint64(t.CAState))
	b = appendUintField(b, `,"retransmits":`, uint64(t.Retransmits))
	b = appendUintField(b, `,"probes":`, uint64(t.Probes))
	b = appendUintField(b, `,"backoff":`, uint64(t.Backoff))
	b = appendUintField(b, `,"options":`, uint64(t.Options))
	b = appendUintField(b, `,"snd_wscale":`, uint64(t.SndWscale))
	b = appendUintField(b, `,"rcv_wscale":`, uint64(t.RcvWscale))
	b = append(b, `,"delivery_rate_app_limited":`...)
	b = strconv.AppendBool(b, t.DeliveryRateAppLimited)
	b = appendUintField(b, `,"fastopen_client_fail":`, uint64(t.FastopenClientFail))
	b = appendUintField(b, `,"rto":`, uint64(t.RTO))
	b = appendUintField(b, `,"ato":`, uint64(t.ATO))
	b = appendUintField(b, `,"snd_mss":`, uint64(t.SndMSS))
	b = appendUintField(b, `,"rcv_mss":`, uint64(t.RcvMSS))
	b = appendUintField(b, `,"unacked":`, uint64(t.Unacked))
	b = appendUintField(b, `,"sacked":`, uint64(t.Sacked))
	b = appendUintField(b, `,"lost":`, uint64(t.Lost))
	b = appendUintField(b, `,"retrans":`, uint64(t.Retrans))
	b = appendUintField(b, `,"fackets":`, uint64(t.Fackets))
	b = appendUintField(b, `,"last_data_sent":`, uint64(t.LastDataSent))
	b = appendUintField(b, `,"last_ack_sent":`, uint64(t.LastAckSent))
	b = appendUintField(b, `,"last_data_recv":`, uint64(t.LastDataRecv))
	b = appendUintField(b, `,"last_ack_recv":`, uint64(t.LastAckRecv))
	b = appendUintField(b, `,"pmtu":`, uint64(t.PMTU))
	b = appendUintField(b, `,"rcv_ssthresh":`, uint64(t.RcvSsthresh))
	b = appendUintField(b, `,"rtt":`, uint64(t.RTT))
	b = appendUintField(b, `,"rttvar":`, uint64(t.RTTVar))
	b = appendUintField(b, `,"snd_ssthresh":`, uint64(t.SndSsthresh))
	b = appendUintField(b, `,"snd_cwnd":`, uint64(t.SndCwnd))
	b = appendUintField(b, `,"advmss":`, uint64(t.AdvMSS))
	b = appendUintField(b, `,"reordering":`, uint64(t.Reordering))
	b = appendUintField(b, `,"rcv_rtt":`, uint64(t.RcvRTT))
	b = appendUintField(b, `,"rcv_space":`, uint64(t.RcvSpace))
	b = appendUintField(b, `,"total_retrans":`, uint64(t.TotalRetrans))
	b = appendUintField(b, `,"pacing_rate":`, t.PacingRate)
	b = appendUintField(b, `,"max_pacing_rate":`, t.MaxPacingRate)
	b = appendUintField(b, `,"bytes_acked":`, t.BytesAcked)
	b = appendUintField(b, `,"bytes_received":`, t.BytesReceived)
	b = appendUintField(b, `,"segs_out":`, uint64(t.SegsOut))
	b = appendUintField(b, `,"segs_in":`, uint64(t.SegsIn))
	b = appendUintField(b, `,"notsent_bytes":`, uint64(t.NotsentBytes))
	b = appendUintField(b, `,"min_rtt":`, uint64(t.MinRTT))
	b = appendUintField(b, `,"data_segs_in":`, uint64(t.DataSegsIn))
	b = appendUintField(b, `,"data_segs_out":`, uint64(t.DataSegsOut))
	b = appendUintField(b, `,"delivery_rate":`, t.DeliveryRate)
	b = appendUintField(b, `,"busy_time":`, t.BusyTime)
	b = appendUintField(b, `,"rwnd_limited":`, t.RwndLimited)
	b = appendUintField(b, `,"sndbuf_limited":`, t.SndbufLimited)
	b = appendUintField(b, `,"delivered":`, uint64(t.Delivered))
	b = appendUintField(b, `,"delivered_ce":`, uint64(t.DeliveredCE))
	b = appendUintField(b, `,"bytes_sent":`, t.BytesSent)
	b = appendUintField(b, `,"bytes_retrans":`, t.BytesRetrans)
	b = appendUintField(b, `,"dsack_dups":`, uint64(t.DSACKDups))
	b = appendUintField(b, `,"reord_seen":`, uint64(t.ReordSeen))
	b = appendUintField(b, `,"rcv_ooopack":`, uint64(t.RcvOOOPack))
	b = appendUintField(b, `,"snd_wnd":`, uint64(t.SndWnd))
	b = appendUintField(b, `,"rcv_wnd":`, uint64(t.RcvWnd))
	b = appendUintField(b, `,"rehash":`, uint64(t.Rehash))
	b = appendUintField(b, `,"total_rto":`, uint64(t.TotalRTO))
	b = appendUintField(b, `,"total_rto_recoveries":`, uint64(t.TotalRTORecoveries))
	b = appendUintField(b, `,"total_rto_time":`, uint64(t.TotalRTOTime))
	return append(b, '}')
}

func appendUintField(b []byte, name string, v uint64) []byte {
	return strconv.AppendUint(append(b, name...), v, 10)
}

// appendJSONEndpoint writes what Endpoint's MarshalText gives ("" for
// the zero one) as a JSON string. An endpoint has no zone, so nothing in
// it needs escaping.
func appendJSONEndpoint(b []byte, e Endpoint) []byte {
	b = append(b, '"')
	if e.IsValid() {
		b = e.AppendTo(b)
	}
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// AppendJSONString quotes s as encoding/json does by default: <, > and &
// escaped for HTML, control characters as \n, \t... or \u00XX, invalid
// UTF-8 as \ufffd, and U+2028, U+2029 escaped.
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
