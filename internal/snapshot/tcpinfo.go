// SPDX-License-Identifier: Apache-2.0

package snapshot

import "strconv"

// TCPInfo mirrors the kernel's struct tcp_info (include/uapi/linux/tcp.h)
// up to Linux 6.18. JSON names are the kernel's without the tcpi_ prefix.
// Len is how many bytes the kernel sent: fields past it were not sent by
// that kernel and read as zero; use Has to tell. Len is 16 bits, as a
// netlink attribute's length is: with the one-byte fields it fills the
// first 12 bytes, and the struct takes 256 bytes, not 264.
type TCPInfo struct {
	Len uint16 `json:"len"`

	State                  uint8  `json:"state"`
	CAState                uint8  `json:"ca_state"`
	Retransmits            uint8  `json:"retransmits"`
	Probes                 uint8  `json:"probes"`
	Backoff                uint8  `json:"backoff"`
	Options                uint8  `json:"options"`
	SndWscale              uint8  `json:"snd_wscale"`
	RcvWscale              uint8  `json:"rcv_wscale"`
	DeliveryRateAppLimited bool   `json:"delivery_rate_app_limited"`
	FastopenClientFail     uint8  `json:"fastopen_client_fail"`
	RTO                    uint32 `json:"rto"`
	ATO                    uint32 `json:"ato"`
	SndMSS                 uint32 `json:"snd_mss"`
	RcvMSS                 uint32 `json:"rcv_mss"`
	Unacked                uint32 `json:"unacked"`
	Sacked                 uint32 `json:"sacked"`
	Lost                   uint32 `json:"lost"`
	Retrans                uint32 `json:"retrans"`
	Fackets                uint32 `json:"fackets"`
	LastDataSent           uint32 `json:"last_data_sent"`
	LastAckSent            uint32 `json:"last_ack_sent"`
	LastDataRecv           uint32 `json:"last_data_recv"`
	LastAckRecv            uint32 `json:"last_ack_recv"`
	PMTU                   uint32 `json:"pmtu"`
	RcvSsthresh            uint32 `json:"rcv_ssthresh"`
	RTT                    uint32 `json:"rtt"`    // microseconds
	RTTVar                 uint32 `json:"rttvar"` // microseconds
	SndSsthresh            uint32 `json:"snd_ssthresh"`
	SndCwnd                uint32 `json:"snd_cwnd"` // segments
	AdvMSS                 uint32 `json:"advmss"`
	Reordering             uint32 `json:"reordering"`
	RcvRTT                 uint32 `json:"rcv_rtt"`
	RcvSpace               uint32 `json:"rcv_space"`
	TotalRetrans           uint32 `json:"total_retrans"`
	PacingRate             uint64 `json:"pacing_rate"`
	MaxPacingRate          uint64 `json:"max_pacing_rate"`
	BytesAcked             uint64 `json:"bytes_acked"`
	BytesReceived          uint64 `json:"bytes_received"`
	SegsOut                uint32 `json:"segs_out"`
	SegsIn                 uint32 `json:"segs_in"`
	NotsentBytes           uint32 `json:"notsent_bytes"`
	MinRTT                 uint32 `json:"min_rtt"`
	DataSegsIn             uint32 `json:"data_segs_in"`
	DataSegsOut            uint32 `json:"data_segs_out"`
	DeliveryRate           uint64 `json:"delivery_rate"`  // bytes per second
	BusyTime               uint64 `json:"busy_time"`      // microseconds
	RwndLimited            uint64 `json:"rwnd_limited"`   // microseconds
	SndbufLimited          uint64 `json:"sndbuf_limited"` // microseconds
	Delivered              uint32 `json:"delivered"`
	DeliveredCE            uint32 `json:"delivered_ce"`
	BytesSent              uint64 `json:"bytes_sent"`
	BytesRetrans           uint64 `json:"bytes_retrans"`
	DSACKDups              uint32 `json:"dsack_dups"`
	ReordSeen              uint32 `json:"reord_seen"`
	RcvOOOPack             uint32 `json:"rcv_ooopack"`
	SndWnd                 uint32 `json:"snd_wnd"` // peer's advertised window, bytes
	RcvWnd                 uint32 `json:"rcv_wnd"` // our advertised window, bytes
	Rehash                 uint32 `json:"rehash"`
	TotalRTO               uint16 `json:"total_rto"`
	TotalRTORecoveries     uint16 `json:"total_rto_recoveries"`
	TotalRTOTime           uint32 `json:"total_rto_time"` // milliseconds
}

// Offsets (end of field, in bytes) of tcp_info fields that appeared in
// later kernels; Has compares them against Len.
const (
	EndPacingRate    = 112 // 4.0
	EndBytesReceived = 136 // 4.1
	EndSegsIn        = 144 // 4.2
	EndDataSegsOut   = 160 // 4.6
	EndDeliveryRate  = 168 // 4.9
	EndChrono        = 192 // busy_time, rwnd_limited, sndbuf_limited: 4.10
	EndDelivered     = 196 // 4.18
	EndDeliveredCE   = 200 // 4.18
	EndBytesRetrans  = 216 // 4.19
	EndRcvOOOPack    = 228 // 5.4
	EndSndWnd        = 232 // 5.5
	EndRcvWnd        = 236 // 6.2
	EndTotalRTOTime  = 248 // 6.7
	// SizeKnown is the size of the struct as decoded here.
	SizeKnown = EndTotalRTOTime
)

// Has reports whether the kernel sent the field ending at byte offset end.
func (t *TCPInfo) Has(end int) bool { return t != nil && int(t.Len) >= end }

func quote(s string) string { return strconv.Quote(s) }
