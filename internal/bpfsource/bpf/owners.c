// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* Open files of every process, from an iter/task_file iterator: the
 * in-kernel replacement for reading /proc/PID/fd/N one readlink at a time.
 *
 * For each (task, fd, file) the kernel visits, one fixed-size struct
 * file_owner is written to the seq_file: the task's tgid and pid (both
 * as the initial pid namespace numbers them), the fd, and the inode
 * number when the file is a socket (0 otherwise). Threads that share
 * their group leader's file table are skipped by the kernel; a thread
 * with a table of its own is visited under its own pid. Nothing is
 * written to any task or file.
 *
 * The kernel types are declared with a "___fo" flavour suffix (CO-RE
 * ignores it when matching names).
 */

#include "vmlinux.h"

#define SEC(name) __attribute__((section(name), used))

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct seq_file;

struct bpf_iter_meta___fo {
	struct seq_file *seq;
};

struct task_struct___fo {
	int pid;
	int tgid;
};

struct inode___fo {
	unsigned short i_mode;
	unsigned long i_ino;
};

struct file___fo {
	struct inode___fo *f_inode;
};

#pragma clang attribute pop

static long (*bpf_seq_write)(struct seq_file *m, const void *data, __u32 len) = (void *)127;

#define S_IFMT 00170000
#define S_IFSOCK 0140000

/* One record; decoded by decodeFileOwners (owners.go). */
struct file_owner {
	__u32 tgid;
	__u32 pid;
	__u32 fd;
	__u32 ino; /* socket inode; 0 for any other file */
};

const struct file_owner *unused_file_owner __attribute__((unused));

/* ctx is struct bpf_iter__task_file: meta at 0, task at 8, fd at 16,
 * file at 24 (task and file NULL at the end of the walk). */
SEC("iter/task_file")
int file_owners(__u64 *ctx)
{
	struct bpf_iter_meta___fo *meta = (void *)ctx[0];
	struct task_struct___fo *task = (void *)ctx[1];
	struct file___fo *file = (void *)ctx[3];
	if (!task || !file)
		return 0;
	struct file_owner r = {};
	r.tgid = task->tgid;
	r.pid = task->pid;
	r.fd = (__u32)ctx[2];
	struct inode___fo *in = file->f_inode;
	if (in && (in->i_mode & S_IFMT) == S_IFSOCK)
		r.ino = (__u32)in->i_ino;
	bpf_seq_write(meta->seq, &r, sizeof(r));
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
