// SPDX-License-Identifier: Apache-2.0

package linkemu

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tcpdoctor/tcpdoctor/internal/capability"
)

// Offload flags for TUNSETOFFLOAD (linux/if_tun.h); x/sys lacks them.
const (
	tunFCSUM   = 0x01
	tunFTSO4   = 0x02
	tunFTSO6   = 0x04
	tunFTSOECN = 0x08
)

// vnetHdrLen is sizeof(struct virtio_net_hdr), the default header length
// the kernel puts in front of each packet with IFF_VNET_HDR.
const vnetHdrLen = 10

// ErrPermission is wrapped, next to the system's error, by errors from
// creating the TUN device without CAP_NET_ADMIN.
var ErrPermission error = &capability.Missing{Cap: unix.CAP_NET_ADMIN, Name: "CAP_NET_ADMIN", Text: "needs CAP_NET_ADMIN"}

// permission adds ErrPermission to a permission error, leaves others.
func permission(err error) error {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w (%w)", err, ErrPermission)
	}
	return err
}

// openTUN creates the TUN device name in the calling thread's network
// namespace and returns its non-blocking fd. With offload the kernel hands
// over and accepts GSO packets of up to 64 KiB (checksums left partial);
// without it every packet is one wire packet.
func openTUN(name string, offload bool) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("linkemu: open tun: %w", permission(err))
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("linkemu: tun name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("linkemu: TUNSETIFF %s: %w", name, permission(err))
	}
	flags := 0
	if offload {
		flags = tunFCSUM | tunFTSO4 | tunFTSO6 | tunFTSOECN
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, flags); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("linkemu: TUNSETOFFLOAD %s: %w", name, err)
	}
	return fd, nil
}
