// SPDX-License-Identifier: Apache-2.0

package bpfsource

// Regenerate the committed objects and Go bindings (needs clang-14):
// scripts/bpf-generate.sh, or go generate ./internal/bpfsource.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -D__TARGET_ARCH_x86 -Wall" -target bpfel -type flow_key -type flow_counts lifecycle bpf/lifecycle.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -D__TARGET_ARCH_x86 -Wall" -target bpfel -type event -type drop_key -type peer_key events bpf/events.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -D__TARGET_ARCH_x86 -Wall" -target bpfel -type sock_lock socklocks bpf/socklocks.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -D__TARGET_ARCH_x86 -Wall" -target bpfel -type trace_event -type watched_val traceprog bpf/trace.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -D__TARGET_ARCH_x86 -Wall" -target bpfel -type file_owner owners bpf/owners.c
