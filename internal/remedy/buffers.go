// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"fmt"
	"time"

	"github.com/tcpdoctor/tcpdoctor/internal/bdp"
	"github.com/tcpdoctor/tcpdoctor/internal/diag"
	"github.com/tcpdoctor/tcpdoctor/internal/units"
)

// The buffer fixes of rwnd-limited and sndbuf-limited, also used by
// trace's verdicts.

// UnpinRcvBuf is the fix for a pinned receive buffer: the receiver (who)
// stops pinning it.
func UnpinRcvBuf(who string) diag.Fix {
	return diag.Fix{Scope: "application", Text: "receiver side, " + who + ": stop pinning the receive buffer (remove Java setReceiveBufferSize, Netty ChannelOption.SO_RCVBUF, Go (*net.TCPConn).SetReadBuffer, setsockopt(SO_RCVBUF)) so receive autotuning grows it up to tcp_rmem[2]",
		Risk: "more memory per busy connection on the receiver"}
}

// SizeRcvBuf sets the receiver's buffer to what plan asks, or says how to
// work it out when the path's rate is unknown.
func SizeRcvBuf(plan bdp.Plan, rtt time.Duration) diag.Fix {
	if plan.BDP > 0 {
		ask := fmt.Sprint(int64(plan.AskRcvBuf))
		return diag.Fix{Scope: "application", Text: "or set the receiver's buffer to " + ask + " bytes (the kernel doubles it and advertises about half of the result), e.g. Java socket.setReceiveBufferSize(" + ask + ")",
			Command: "SO_RCVBUF=" + ask, Risk: "requests above net.core.rmem_max are silently capped; a fixed size is wrong again when the path changes"}
	}
	return diag.Fix{Scope: "application", Text: "or set the receiver's buffer to at least the path's BDP (the kernel doubles it and advertises about half of the result)",
		Command: "tcpdoctor bdp --rtt " + units.RTT(rtt) + " --bandwidth <link rate>", Risk: "requests above net.core.rmem_max are silently capped"}
}

// UnpinSndBuf is the fix for a pinned send buffer: the sender stops
// pinning it.
func UnpinSndBuf() diag.Fix {
	return diag.Fix{Scope: "application", Text: "stop pinning the send buffer so autotuning (up to tcp_wmem[2]) sizes it: remove Java socket.setSendBufferSize, Netty ChannelOption.SO_SNDBUF, Go (*net.TCPConn).SetWriteBuffer, nginx listen/proxy sndbuf=, setsockopt(SO_SNDBUF)",
		Risk: "more memory per busy connection (bounded by tcp_wmem and tcp_mem)"}
}

// SizeSndBuf sets the send buffer to what plan asks, or says how to work
// it out when the path's rate is unknown.
func SizeSndBuf(plan bdp.Plan, rtt time.Duration) diag.Fix {
	if plan.BDP > 0 {
		ask := fmt.Sprint(int64(plan.AskSndBuf))
		return diag.Fix{Scope: "application", Text: "or set the send buffer to " + ask + " bytes, e.g. Java socket.setSendBufferSize(" + ask + ")",
			Command: "SO_SNDBUF=" + ask, Risk: "a fixed size is wrong again when RTT or rate change; requests above net.core.wmem_max are silently capped"}
	}
	return diag.Fix{Scope: "application", Text: "or set the send buffer to at least the path's BDP",
		Command: "tcpdoctor bdp --rtt " + units.RTT(rtt) + " --bandwidth <link rate>", Risk: "requests above net.core.wmem_max are silently capped"}
}

// IfSet makes an unpinning fix conditional, for a buffer whose lock bit
// was not read: only the bit (or the application's own setsockopt) shows
// who set it, a round size is a hint. who is "the application" or the
// receiver's name, opt "SO_SNDBUF" or "SO_RCVBUF".
func IfSet(f diag.Fix, who, opt string) diag.Fix {
	f.Text = "if " + who + " sets " + opt + " (its lock bit was not read to show it): " + f.Text
	return f
}
