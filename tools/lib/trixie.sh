# shellcheck shell=sh
# A Debian 13 (trixie) root for the OpenSSL 3.5 leg of tools/run-tests. Sourced, not run;
# needs common.sh, root and debootstrap.
#
# The root is kept in $TRIXIE_ROOT and reused while its stamp names the packages below:
# the stamp is written last, so a root whose debootstrap was cut short is made again.

TRIXIE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/tlstune/trixie"
# What the program, syscall, fault and CA tests run, and what builds them.
TRIXIE_PACKAGES="curl python3 nginx-light socat stunnel4 strace openssl ca-certificates
wget libssl-dev g++ meson ninja-build libgtest-dev pkg-config binutils procps python3-cryptography
libpython3.13-testsuite liburing-dev lighttpd lighttpd-mod-openssl"
trixie_mounts=""
trixie_child=""

# Makes $TRIXIE_ROOT and mounts it (trixie_mount), installing the packages unless its stamp
# names them all. A root whose debootstrap was cut short has no .base and is made again.
trixie_prepare() {
	# One run at a time: another checkout mounted at /tlstune would hide this one.
	mkdir -p "${TRIXIE_ROOT%/*}"
	exec 9>"$TRIXIE_ROOT.lock"
	if ! flock -n 9; then
		echo "tlstune: waiting for the other run that uses $TRIXIE_ROOT" >&2
		flock 9
	fi
	stamp="$TRIXIE_ROOT/.tlstune-complete"
	# shellcheck disable=SC2086,SC2116 # the split joins the list's lines with spaces
	wanted=$(echo $TRIXIE_PACKAGES)
	if [ ! -f "$TRIXIE_ROOT/.base" ]; then
		echo "tlstune: debootstrap trixie into $TRIXIE_ROOT" >&2
		rm -rf "$TRIXIE_ROOT"
		mkdir -p "$TRIXIE_ROOT"
		# shellcheck disable=SC2046
		debootstrap --variant=minbase trixie "$TRIXIE_ROOT" $(debian_mirror) \
			>"$TRIXIE_ROOT.log" 2>&1 || {
			tail -20 "$TRIXIE_ROOT.log" >&2
			echo "tlstune: debootstrap failed; its log is $TRIXIE_ROOT.log" >&2
			return 1
		}
		# No service starts in this root: nginx's package would start one on port 80 of
		# the host's network.
		printf '#!/bin/sh\nexit 101\n' >"$TRIXIE_ROOT/usr/sbin/policy-rc.d"
		chmod 755 "$TRIXIE_ROOT/usr/sbin/policy-rc.d"
		touch "$TRIXIE_ROOT/.base"
	fi
	trixie_mount
	[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && return 0
	echo "tlstune: installing in $TRIXIE_ROOT: $wanted" >&2
	# shellcheck disable=SC2086
	{ trixie_run apt-get update -qq &&
		trixie_run env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends $TRIXIE_PACKAGES; } \
		>>"$TRIXIE_ROOT.log" 2>&1 || {
		tail -20 "$TRIXIE_ROOT.log" >&2
		echo "tlstune: apt-get failed in $TRIXIE_ROOT; its log is $TRIXIE_ROOT.log" >&2
		return 1
	}
	echo "$wanted" >"$stamp"
}

# Mounts what programs in the root need, and the checkout at /tlstune. The caller traps
# trixie_unmount on EXIT, INT and TERM, so a failure or a kill leaves no mount behind.
trixie_mount() {
	for mount in proc:proc sys:sysfs dev:bind dev/pts:bind tlstune:checkout; do
		target="$TRIXIE_ROOT/${mount%%:*}"
		mkdir -p "$target"
		case "${mount#*:}" in
		bind) mount --bind "/${mount%%:*}" "$target" ;;
		checkout) mount --bind "$PWD" "$target" ;;
		*) mount -t "${mount#*:}" "${mount#*:}" "$target" ;;
		esac
		trixie_mounts="$target $trixie_mounts"
	done
}

# Stops what trixie_run still runs, then unmounts in reverse order; a mount still busy (a
# process left behind) is detached lazily. Runs from a trap under set -e: nothing here may
# fail (the killed child's status would end the trap before the unmounts).
trixie_unmount() {
	if [ -n "$trixie_child" ]; then
		kill "$trixie_child" 2>/dev/null || true
		wait "$trixie_child" 2>/dev/null || true
	fi
	trixie_child=""
	for target in $trixie_mounts; do
		umount "$target" 2>/dev/null || umount -l "$target" || true
	done
	trixie_mounts=""
}

# Runs "$@" in the root with a clean environment. In the background with a wait, so that a
# signal reaches the caller's trap at once rather than when the command ends.
trixie_run() {
	chroot "$TRIXIE_ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
		LANG=C.UTF-8 "$@" &
	trixie_child=$!
	wait "$trixie_child" && trixie_child="" && return 0
	set -- $?
	trixie_child=""
	return "$1"
}

# Builds tlstune in the root against its OpenSSL 3.5 (build-trixie/ in the checkout) and
# runs meson test there with "$@". Leaves the mounts to the caller's trap.
trixie_leg() {
	trixie_prepare || return 1
	rm -f build-trixie/meson-logs/testlog.junit.xml
	trixie_run sh -c "cd /tlstune && . tools/lib/common.sh && build_tree build-trixie none" ||
		return 1
	trixie_run sh -c 'cd /tlstune && exec meson test -C build-trixie --print-errorlogs "$@"' \
		sh "$@"
}
