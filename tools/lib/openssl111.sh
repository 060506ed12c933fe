# shellcheck shell=sh
# OpenSSL 1.1.1 from Debian 11's packages, for the 1.1.1 leg of tools/run-tests. Sourced,
# not run; needs common.sh and apt.
#
# libssl1.1 and libssl-dev are fetched with apt-get download through a private apt state
# (the system's apt configuration and its OpenSSL stay as they are) and unpacked with
# dpkg-deb -x under $OPENSSL111_DIR. Its pkgconfig/ directory describes that copy, with an
# rpath, so what links against it runs with it. An old-style DT_RPATH, which also serves
# libssl's own need of libcrypto: a program that calls only SSL_* functions (call_cost)
# needs libcrypto through libssl alone, which a DT_RUNPATH would not reach.

OPENSSL111_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/tlstune/openssl-1.1.1"

# The system's apt sources for its own release and its updates and security suites, with
# bullseye in place of the release's name.
openssl111_sources() {
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	# shellcheck disable=SC2016 # apt's own placeholders
	apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Identifier: Packages' |
		sort -u | while read -r release uri; do
			case "$release" in
			"$codename" | "$codename"-*)
				echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
					"$uri bullseye${release#"$codename"} main"
				;;
			esac
		done
}

# Fetches and unpacks the packages unless the stamp (written last) is there.
openssl111_ensure() {
	if [ -f "$OPENSSL111_DIR/.tlstune-complete" ]; then
		openssl111_pkgconfig
		return 0
	fi
	echo "tlstune: fetching OpenSSL 1.1.1 from bullseye into $OPENSSL111_DIR" >&2
	rm -rf "$OPENSSL111_DIR"
	apt="$OPENSSL111_DIR/apt"
	mkdir -p "$apt/state/lists/partial" "$apt/cache/archives/partial" "$OPENSSL111_DIR/debs"
	openssl111_sources >"$apt/sources.list"
	: >"$apt/status"
	set -- -o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
		-o Dir::State="$apt/state" -o Dir::State::status="$apt/status" \
		-o Dir::Cache="$apt/cache" -o Debug::NoLocking=true -o APT::Sandbox::User=root -q
	apt-get "$@" update >&2 || return 1
	(cd "$OPENSSL111_DIR/debs" && apt-get "$@" download libssl1.1 libssl-dev) >&2 || return 1
	for deb in "$OPENSSL111_DIR"/debs/*.deb; do
		dpkg-deb -x "$deb" "$OPENSSL111_DIR/root" || return 1
	done
	openssl111_pkgconfig
	touch "$OPENSSL111_DIR/.tlstune-complete"
}

# Debian's .pc files name /usr; these name the unpacked copy, whose opensslconf.h is in the
# multiarch include directory (the system's 3.0 one would be found there first otherwise).
openssl111_pkgconfig() {
	usr="$OPENSSL111_DIR/root/usr"
	multiarch=$(gcc -print-multiarch)
	mkdir -p "$OPENSSL111_DIR/pkgconfig"
	for pc in "$usr/lib/$multiarch/pkgconfig"/*.pc; do
		sed -e "s|^prefix=.*|prefix=$usr|" \
			-e "s|^Cflags:.*|Cflags: -I\${includedir} -I\${includedir}/$multiarch|" \
			-e "s|^Libs: -L\${libdir}|Libs: -L\${libdir} -Wl,--disable-new-dtags,-rpath,\${libdir}|" \
			"$pc" >"$OPENSSL111_DIR/pkgconfig/${pc##*/}"
	done
}

# Builds build-openssl-1.1.1/ against the unpacked copy (fetched first where it is not).
openssl111_build() {
	openssl111_ensure || return 1
	if [ ! -f build-openssl-1.1.1/build.ninja ]; then
		meson setup build-openssl-1.1.1 --buildtype=debugoptimized \
			--pkg-config-path="$OPENSSL111_DIR/pkgconfig" >/dev/null || return 1
	fi
	build_tree build-openssl-1.1.1
}

# The examples and the unit, abi, syscall and CA tests and the example-driven program tests,
# built against 1.1.1 (build-openssl-1.1.1/) and run with the shim. The CA cases that run
# Debian 12's curl, python and socat are left out: those load its OpenSSL 3.0.
OPENSSL111_TESTS="unit-config unit-ca-cache unit-coalescing unit-held-plaintext unit-readiness unit-strace-log abi
syscall-read-path syscall-write-path programs-ca-cache programs-faults programs-readiness-cases
programs-writer-cases programs-record-cases"
OPENSSL111_FILTER="-CaCache.Python*:CaCache.Curl*:CaCache.Socat*"

openssl111_leg() {
	openssl111_build || return 1
	rm -f build-openssl-1.1.1/meson-logs/testlog.junit.xml
	# shellcheck disable=SC2086
	GTEST_FILTER="$OPENSSL111_FILTER" \
		meson test -C build-openssl-1.1.1 --print-errorlogs $OPENSSL111_TESTS
}
