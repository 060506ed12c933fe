# Shared by tools/demo and tools/run-tests. Sourced, not run.

# Installs the Debian packages in "$@" that are not installed yet (needs root and apt).
need_packages() {
	missing=""
	for package in "$@"; do
		dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $package"
	done
	[ -z "$missing" ] && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "tlstune: missing Debian packages:$missing; run as root or: apt-get install$missing" >&2
		exit 1
	fi
	echo "tlstune: installing$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >&2
}

# liburing-dev: an example that makes its io_uring instance through liburing.
BUILD_PACKAGES="meson ninja-build g++ pkg-config libssl-dev libgtest-dev openssl binutils liburing-dev"
# libpython3.11-testsuite: python's own TLS tests (test.test_ssl), run with the shim.
# php-cli and php-curl: PHP binds its curl extension past the preload (RTLD_DEEPBIND).
TEST_PACKAGES="strace curl nginx-light lighttpd lighttpd-mod-openssl socat stunnel4 python3 ca-certificates ministat gnuplot-nox wget nghttp2-client libpython3.11-testsuite php-cli php-curl"
# The OpenSSL legs: a Debian 13 root, and Debian 11's OpenSSL 1.1.1 unpacked.
LEG_PACKAGES="debootstrap"
# libFuzzer: clang and its runtime libraries (Debian 12 ships LLVM 14).
FUZZ_PACKAGES="clang libclang-rt-14-dev"

# Configures (once) and builds the tree in directory $1; $2 names sanitizers (or none).
build_tree() {
	if [ ! -f "$1/build.ninja" ]; then
		# Sanitizer runtimes resolve the shim's instrumentation symbols at load time.
		meson setup "$1" --buildtype=debugoptimized -Db_sanitize="${2:-none}" \
			-Db_lundef="$([ "${2:-none}" = none ] && echo true || echo false)" >/dev/null
	fi
	# Quiet unless it fails; then the compiler's messages again, without the progress lines.
	meson compile -C "$1" >/dev/null ||
		{ meson compile -C "$1" 2>&1 | grep -v '^\[' >&2; return 1; }
}

# The libFuzzer targets with clang, in build-fuzz/.
build_fuzz_tree() {
	[ -f build-fuzz/build.ninja ] ||
		CXX=clang++ meson setup build-fuzz -Dtests=false -Dfuzzing=true >/dev/null
	meson compile -C build-fuzz >/dev/null
}

# The Debian mirror this system's apt uses for its own release (apt's configuration, not a
# fixed address), or nothing: then debootstrap takes its default.
debian_mirror() {
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	# shellcheck disable=SC2016 # apt's own placeholders
	apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Identifier: Packages' 2>/dev/null |
		awk -v release="$codename" '$1 == release { print $2; exit }'
}
