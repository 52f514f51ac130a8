#!/usr/bin/env bash
# Runs the ext4 journal-abort attack on the FileLedger (localfs/ext4abort_test.go) on a real
# kernel: ext4 on a loop device whose backing file lives on a 300 MB tmpfs, in both modes (two
# admissions sharing a syncfs round; one admission and its folder's fsync). Needs root, and
# e2fsprogs and util-linux (mkfs.ext4, debugfs, losetup). Leaves nothing mounted.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "ext4-journal-abort: needs root (loop devices, mounts)" >&2; exit 2; }
for c in mkfs.ext4 debugfs losetup; do
	command -v "$c" >/dev/null || { echo "ext4-journal-abort: $c is missing (apt-get install e2fsprogs util-linux)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/amiss-ext4.XXXXXX)
mnt="$work/mnt" tmp="$work/tmpfs"
mkdir -p "$mnt" "$tmp"
loop=""
cleanup() {
	umount "$mnt" 2>/dev/null || true
	[ -n "$loop" ] && losetup -d "$loop" 2>/dev/null || true
	umount "$tmp" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
go test -c -tags ext4attack -o "$work/localfs.test" ./localfs/
status=0
for mode in pair single; do
	umount "$mnt" 2>/dev/null || true
	[ -n "$loop" ] && losetup -d "$loop"
	umount "$tmp" 2>/dev/null || true
	mount -t tmpfs -o size=300M tmpfs "$tmp"
	dd if=/dev/zero of="$tmp/backing" bs=1M count=128 status=none
	mkfs.ext4 -q -b 4096 -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$tmp/backing"
	fallocate -l 128M "$tmp/backing"
	# The journal's extents (inode 8) as logical:physical:length.
	journal=$(debugfs -R "stat <8>" "$tmp/backing" 2>/dev/null | sed -n '/EXTENTS/{n;p}' | tr -d ' ' | tr ',' '\n' |
		sed -E 's/^\(([0-9]+)-([0-9]+)\):([0-9]+)-[0-9]+$/\1 \3 \2/' | awk '{print $1":"$2":"($3-$1+1)}' | paste -sd,)
	loop=$(losetup -f --show "$tmp/backing")
	mount -o nodiscard,commit=600 "$loop" "$mnt"
	export AMISS_EXT4_MNT="$mnt" AMISS_EXT4_BACKING="$tmp/backing" AMISS_EXT4_FILLER="$tmp/filler" \
		AMISS_EXT4_KEYS="$work/keys" AMISS_EXT4_JOURNAL="$journal" AMISS_EXT4_MODE="$mode"
	echo "== $mode (journal extents $journal)"
	(cd localfs && "$work/localfs.test" -test.run '^TestExt4JournalAbort$' -test.count=1 -test.v) | grep -E '^(---|PASS|FAIL|ok)|ext4abort_test' || status=1
	umount "$mnt"
	rm -f "$tmp/filler"
	mount -o nodiscard "$loop" "$mnt"
	(cd localfs && "$work/localfs.test" -test.run '^TestExt4JournalAbortRecovered$' -test.count=1 -test.v) | grep -E '^(---|PASS|FAIL|ok)|ext4abort_test' || status=1
done
exit $status
