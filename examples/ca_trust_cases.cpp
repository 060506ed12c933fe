/*
 * Programs that look at or change what a CA file put into their stores (issue 21), each
 * an ordinary OpenSSL program run with and without the shim: the output must be the same.
 *   ca_trust_cases DIR CASE
 * DIR is an empty directory the case writes its PKI and CA files into. Prints what the
 * program could see: load results, verify results and error codes, store contents.
 * Exit status 0, or 2 when the case itself could not be set up.
 *
 * Cases:
 *   reject-add        context 1 rejects the root for serverAuth on its copy; context 2 verifies
 *   trust-add         context 1 trusts the root for emailProtection only; context 2 verifies
 *   reject-clear      the file rejects serverAuth (TRUSTED CERTIFICATE); context 1 clears it
 *   alias             context 1 names its root; context 2 lists its own
 *   chain-reject      context 1 rejects the root its verification found; context 2 verifies
 *   rewrite-mmap      the file rewritten in place, same size, through MAP_SHARED: one key byte
 *   make-pki          writes the bundle and a leaf for base-provider and properties
 *   base-provider     the file loaded while only the "base" provider is active, then "default"
 *   properties        the file loaded under default properties no provider matches, then verified under none
 *   properties-later  the same after a first load under none
 *   unload-default    loaded, then "default" unloaded before the first verify, then loaded again
 *   properties-after  the same with default properties that no provider matches, then none
 *   fips-after        the same with FIPS asked for, then not
 *   default-context   the same with the thread's default library context one of "base" alone
 *   config-after      the same with a configuration loaded that sets such properties, then none
 *   fifo              the CA file is a FIFO a thread writes the bundle into
 *   seccomp           the program confines itself to an allow-list, then loads and verifies
 *   own-lookup        a lookup method of the program's answers from a second store
 *   check-issued      a check_issued callback counts the store's objects
 *   check-issued-walk an expired and a valid root A (one key), then six roots whose names
 *                     sort first; a check_issued callback lists the store at its second
 *                     call, inside OpenSSL's walk over the roots A
 *   kept-list         the object list taken before a load, read after it
 *   trailing-bytes    a certificate block with bytes after its DER
 *   twins-after       a file with two roots of one subject loaded once; then no SHA-1 (default
 *                     properties FIPS, no FIPS provider); the file loaded into a second store
 */

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <map>
#include <thread>

#include <openssl/pem.h>
#include <openssl/x509v3.h>
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#include <openssl/provider.h>
#endif

#include "common/example.h"

using namespace example;

namespace {

std::string g_dir;

std::string path(const char *name) { return g_dir + "/" + name; }

EVP_PKEY *newKey()
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	EVP_PKEY *key = EVP_RSA_gen(2048);
#else
	EVP_PKEY *key = EVP_PKEY_new();
	RSA *rsa = RSA_new();
	BIGNUM *e = BN_new();
	BN_set_word(e, RSA_F4);
	RSA_generate_key_ex(rsa, 2048, e, nullptr);
	BN_free(e);
	EVP_PKEY_assign_RSA(key, rsa);
#endif
	if (!key)
		fail("key generation");
	return key;
}

void addExtension(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx(&ctx, issuer, x, nullptr, nullptr, 0);
	X509_EXTENSION *extension = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
	if (!extension || !X509_add_ext(x, extension, -1))
		fail("extension");
	X509_EXTENSION_free(extension);
}

/* A certificate named cn with key's public half, signed by issuerKey (self-signed when null). */
X509 *certificate(const char *cn, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuerKey, bool ca, long serial)
{
	X509 *x = X509_new();
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
	X509_NAME *name = X509_NAME_new();
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char *>(cn),
				   -1, -1, 0);
	X509_set_subject_name(x, name);
	X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
	X509_NAME_free(name);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 86400);
	X509_set_pubkey(x, key);
	X509 *signer = issuer ? issuer : x;
	addExtension(x, signer, NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
	addExtension(x, signer, NID_subject_key_identifier, "hash");
	addExtension(x, signer, NID_authority_key_identifier, "keyid");
	if (!ca)
		addExtension(x, signer, NID_ext_key_usage, "serverAuth");
	if (!X509_sign(x, issuerKey ? issuerKey : key, EVP_sha256()))
		fail("signing");
	return x;
}

std::string pemOf(X509 *x, bool trusted = false)
{
	BIO *out = BIO_new(BIO_s_mem());
	if (trusted)
		PEM_write_bio_X509_AUX(out, x);
	else
		PEM_write_bio_X509(out, x);
	char *data = nullptr;
	const long n = BIO_get_mem_data(out, &data);
	std::string pem(data, static_cast<size_t>(n));
	BIO_free(out);
	return pem;
}

void writeFile(const std::string &file, const std::string &content)
{
	FILE *f = std::fopen(file.c_str(), "w");
	if (!f || std::fwrite(content.data(), 1, content.size(), f) != content.size() || std::fclose(f) != 0)
		fail("writing a file");
}

/* Three roots, A, B and C, and a leaf issued by A. */
struct Pki {
	EVP_PKEY *keyA, *keyB, *keyC, *leafKey;
	X509 *rootA, *rootB, *rootC, *leaf;
};

Pki makePki()
{
	Pki p;
	p.keyA = newKey();
	p.keyB = newKey();
	p.keyC = newKey();
	p.leafKey = newKey();
	p.rootA = certificate("Root A", p.keyA, nullptr, nullptr, true, 1);
	p.rootB = certificate("Root B", p.keyB, nullptr, nullptr, true, 2);
	p.rootC = certificate("Root C", p.keyC, nullptr, nullptr, true, 3);
	p.leaf = certificate("leaf.example", p.leafKey, p.rootA, p.keyA, false, 4);
	return p;
}

/* The bundle the cases load: roots B, A and C, plain CERTIFICATE blocks. */
std::string bundle(const Pki &p) { return pemOf(p.rootB) + pemOf(p.rootA) + pemOf(p.rootC); }

void printErrors(const char *when)
{
	int count = 0;
	while (unsigned long code = ERR_get_error()) {
		count++;
		std::printf("%s error lib %d reason %d\n", when, ERR_GET_LIB(code), ERR_GET_REASON(code));
	}
	if (!count)
		std::printf("%s no errors\n", when);
}

X509_STORE *loadedStore(const std::string &file)
{
	X509_STORE *store = X509_STORE_new();
	const int loaded = X509_STORE_load_locations(store, file.c_str(), nullptr);
	std::printf("load %d\n", loaded);
	printErrors("load");
	return store;
}

/* Verifies the leaf for a TLS server, as a client does; the verify code, printed. */
int verify(X509_STORE *store, X509 *leaf, const char *label, X509 **top = nullptr)
{
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	X509_STORE_CTX_init(ctx, store, leaf, nullptr);
	X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER);
	const int ok = X509_verify_cert(ctx);
	const int code = X509_STORE_CTX_get_error(ctx);
	std::printf("%s verify %d code %d (%s)\n", label, ok, code, X509_verify_cert_error_string(code));
	if (top) {
		STACK_OF(X509) *chain = X509_STORE_CTX_get0_chain(ctx);
		const int n = chain ? sk_X509_num(chain) : 0;
		*top = n ? sk_X509_value(chain, n - 1) : nullptr;
		if (*top)
			X509_up_ref(*top);
	}
	X509_STORE_CTX_free(ctx);
	ERR_clear_error();
	return code;
}

/* The store's certificate with this subject CN, as enumeration shows it (no reference taken). */
X509 *inStore(X509_STORE *store, const char *cn)
{
	STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(store);
	for (int i = 0; i < sk_X509_OBJECT_num(objects); i++) {
		X509 *x = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i));
		char name[128] = "";
		if (x)
			X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, name, sizeof(name));
		if (x && std::strcmp(name, cn) == 0)
			return x;
	}
	return nullptr;
}

void listStore(X509_STORE *store, const char *label)
{
	STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(store);
	std::printf("%s objects %d\n", label, sk_X509_OBJECT_num(objects));
	for (int i = 0; i < sk_X509_OBJECT_num(objects); i++) {
		X509 *x = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i));
		char name[128] = "";
		int aliasLength = 0;
		const unsigned char *alias = x ? X509_alias_get0(x, &aliasLength) : nullptr;
		if (x)
			X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, name, sizeof(name));
		std::printf("  %s alias %.*s\n", name, alias ? aliasLength : 6,
			    alias ? reinterpret_cast<const char *>(alias) : "(none)");
	}
}

/*
 * Context 1 loads the bundle and changes its own root A (change is false when it could
 * not); context 2 loads the same file afresh, and verifies with what OpenSSL gave it.
 */
void changedInContextOne(const Pki &p, bool (*change)(X509 *root))
{
	writeFile(path("ca.pem"), bundle(p));
	X509_STORE *first = loadedStore(path("ca.pem"));
	X509 *root = inStore(first, "Root A");
	if (!root || !change(root))
		fail("changing root A");
	verify(first, p.leaf, "context 1");
	X509_STORE *second = loadedStore(path("ca.pem"));
	listStore(second, "context 2");
	verify(second, p.leaf, "context 2");
	X509_STORE_free(first);
	X509_STORE_free(second);
}

int rejectAdd(const Pki &p)
{
	changedInContextOne(p, [](X509 *root) {
		return X509_add1_reject_object(root, OBJ_nid2obj(NID_server_auth)) == 1;
	});
	return 0;
}

int trustAdd(const Pki &p)
{
	changedInContextOne(p, [](X509 *root) {
		return X509_add1_trust_object(root, OBJ_nid2obj(NID_email_protect)) == 1;
	});
	return 0;
}

int rejectClear(const Pki &p)
{
	X509 *marked = X509_dup(p.rootA);
	X509_add1_reject_object(marked, OBJ_nid2obj(NID_server_auth));
	writeFile(path("ca.pem"), pemOf(p.rootB) + pemOf(marked, true));
	X509_free(marked);
	X509_STORE *first = loadedStore(path("ca.pem"));
	X509 *root = inStore(first, "Root A");
	if (!root)
		fail("no root A");
	X509_reject_clear(root);
	verify(first, p.leaf, "context 1");
	X509_STORE *second = loadedStore(path("ca.pem"));
	verify(second, p.leaf, "context 2");
	X509_STORE_free(first);
	X509_STORE_free(second);
	return 0;
}

int alias(const Pki &p)
{
	changedInContextOne(p, [](X509 *root) {
		return X509_alias_set1(root, reinterpret_cast<const unsigned char *>("mine"), 4) == 1;
	});
	return 0;
}

int chainReject(const Pki &p)
{
	writeFile(path("ca.pem"), bundle(p));
	X509_STORE *first = loadedStore(path("ca.pem"));
	X509 *top = nullptr;
	verify(first, p.leaf, "context 1", &top);
	if (!top || !X509_add1_reject_object(top, OBJ_nid2obj(NID_server_auth)))
		fail("no chain");
	X509_free(top);
	verify(first, p.leaf, "context 1 again");
	X509_STORE *second = loadedStore(path("ca.pem"));
	verify(second, p.leaf, "context 2");
	X509_STORE_free(first);
	X509_STORE_free(second);
	return 0;
}

/* Root A with one byte of its key's modulus changed: the same size, another key. */
std::string withOtherKey(X509 *root)
{
	unsigned char *der = nullptr;
	const int n = i2d_X509(root, &der);
	const ASN1_BIT_STRING *key = X509_get0_pubkey_bitstr(root);
	std::string bytes(reinterpret_cast<char *>(der), static_cast<size_t>(n));
	OPENSSL_free(der);
	const std::string keyBytes(reinterpret_cast<const char *>(key->data), static_cast<size_t>(key->length));
	const size_t at = bytes.find(keyBytes);
	if (at == std::string::npos)
		fail("key bytes");
	bytes[at + keyBytes.size() / 2] ^= 0x10;
	const unsigned char *p = reinterpret_cast<const unsigned char *>(bytes.data());
	X509 *changed = d2i_X509(nullptr, &p, static_cast<long>(bytes.size()));
	if (!changed)
		fail("changed root");
	const std::string pem = pemOf(changed);
	X509_free(changed);
	return pem;
}

int rewriteMmap(const Pki &p)
{
	const std::string before = pemOf(p.rootB) + pemOf(p.rootA);
	const std::string after = pemOf(p.rootB) + withOtherKey(p.rootA);
	if (before.size() != after.size())
		fail("sizes differ");
	const std::string file = path("ca.pem");
	writeFile(file, before);
	X509_STORE *first = loadedStore(file);
	verify(first, p.leaf, "before");
	struct stat old;
	stat(file.c_str(), &old);
	const int fd = open(file.c_str(), O_RDWR);
	void *map = mmap(nullptr, after.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		fail("mmap");
	std::memcpy(map, after.data(), after.size());
	munmap(map, after.size());
	close(fd);
	/* What a metadata check could see: a write through a mapping may move no stamp. */
	struct stat now;
	stat(file.c_str(), &now);
	std::printf("same inode and size: %d\n", now.st_ino == old.st_ino && now.st_size == old.st_size);
	X509_STORE *second = loadedStore(file);
	verify(second, p.leaf, "after");
	X509_STORE_free(first);
	X509_STORE_free(second);
	return 0;
}

X509 *readCertificate(const std::string &file)
{
	FILE *f = std::fopen(file.c_str(), "r");
	X509 *x = f ? PEM_read_X509(f, nullptr, nullptr, nullptr) : nullptr;
	if (f)
		std::fclose(f);
	if (!x)
		fail("reading a certificate");
	return x;
}

/* Writes the bundle and the leaf for base-provider, which makes no keys itself. */
int makePkiFiles(const Pki &p)
{
	writeFile(path("ca.pem"), bundle(p));
	writeFile(path("leaf.pem"), pemOf(p.leaf));
	return 0;
}

/*
 * Without make-pki's keys in this process, no provider is active before the first
 * explicit load: "base" alone decodes no key. Indexed first with "default" active too,
 * then loaded again with "base" alone, then verified once "default" is back.
 */
int baseProvider()
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	OSSL_PROVIDER *base = OSSL_PROVIDER_load(nullptr, "base");
	OSSL_PROVIDER *defaults = OSSL_PROVIDER_load(nullptr, "default");
	X509 *leaf = readCertificate(path("leaf.pem"));
	X509_STORE *both = loadedStore(path("ca.pem"));
	verify(both, leaf, "loaded under base and default");
	OSSL_PROVIDER_unload(defaults);
	std::printf("default available %d\n", OSSL_PROVIDER_available(nullptr, "default"));
	X509_STORE *baseOnly = loadedStore(path("ca.pem"));
	defaults = OSSL_PROVIDER_load(nullptr, "default");
	verify(baseOnly, leaf, "loaded under base alone");
	verify(both, leaf, "loaded under both, again");
	X509_STORE_free(both);
	X509_STORE_free(baseOnly);
	X509_free(leaf);
	OSSL_PROVIDER_unload(defaults);
	OSSL_PROVIDER_unload(base);
#else
	std::printf("no providers before 3.0\n");
#endif
	return 0;
}

/*
 * Default properties that no provider's decoders match: loading then decodes no key,
 * which 3.0 does not let a program (or the cache) read back. first: a load under no
 * properties comes before.
 */
int properties(bool first)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	X509 *leaf = readCertificate(path("leaf.pem"));
	X509_STORE *plain = first ? loadedStore(path("ca.pem")) : nullptr;
	if (plain)
		verify(plain, leaf, "loaded under no properties");
	EVP_set_default_properties(nullptr, "provider=nonesuch");
	X509_STORE *unmatched = loadedStore(path("ca.pem"));
	EVP_set_default_properties(nullptr, "");
	verify(unmatched, leaf, "loaded under unmatched properties");
	X509_STORE_free(unmatched);
	X509_STORE_free(plain);
	X509_free(leaf);
#else
	(void)first;
	std::printf("no providers before 3.0\n");
#endif
	return 0;
}

/*
 * A store loaded while "default" decodes every key; then, before anything looks the store
 * up, what decodes changes; verified in that state, then once it is undone. OpenSSL
 * decoded the keys at load time, so the second verify succeeds whatever the first said.
 */
int changedAfter(const std::string &change)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	OSSL_PROVIDER *base = OSSL_PROVIDER_load(nullptr, "base");
	OSSL_PROVIDER *defaults = OSSL_PROVIDER_load(nullptr, "default");
	X509 *leaf = readCertificate(path("leaf.pem"));
	X509_STORE *store = loadedStore(path("ca.pem"));
	OSSL_LIB_CTX *baseOnly = nullptr, *previous = nullptr;
	OSSL_PROVIDER *baseOfItsOwn = nullptr;
	if (change == "unload-default") {
		OSSL_PROVIDER_unload(defaults);
	} else if (change == "properties-after") {
		EVP_set_default_properties(nullptr, "provider=nonesuch");
	} else if (change == "fips-after") {
		EVP_default_properties_enable_fips(nullptr, 1);
	} else if (change == "config-after") {
		writeFile(path("openssl.cnf"), "openssl_conf = init\n[init]\nalg_section = evp\n"
					       "[evp]\ndefault_properties = provider=nonesuch\n");
		std::printf("config %d\n", OSSL_LIB_CTX_load_config(nullptr, path("openssl.cnf").c_str()));
	} else {
		baseOnly = OSSL_LIB_CTX_new();
		baseOfItsOwn = OSSL_PROVIDER_load(baseOnly, "base");
		previous = OSSL_LIB_CTX_set0_default(baseOnly);
	}
	verify(store, leaf, "changed");
	ERR_clear_error();
	if (change == "unload-default")
		defaults = OSSL_PROVIDER_load(nullptr, "default");
	else if (change == "properties-after" || change == "config-after")
		EVP_set_default_properties(nullptr, "");
	else if (change == "fips-after")
		EVP_default_properties_enable_fips(nullptr, 0);
	else
		OSSL_LIB_CTX_set0_default(previous);
	verify(store, leaf, "changed back");
	X509_STORE_free(store);
	X509_free(leaf);
	if (baseOfItsOwn)
		OSSL_PROVIDER_unload(baseOfItsOwn);
	OSSL_LIB_CTX_free(baseOnly);
	OSSL_PROVIDER_unload(defaults);
	OSSL_PROVIDER_unload(base);
#else
	(void)change;
	std::printf("no providers before 3.0\n");
#endif
	return 0;
}

int fifo(const Pki &p)
{
	const std::string file = path("ca.fifo");
	if (mkfifo(file.c_str(), 0600) != 0)
		fail("mkfifo");
	const std::string content = bundle(p);
	std::thread writer([&] {
		const int fd = open(file.c_str(), O_WRONLY);
		size_t done = 0;
		while (fd >= 0 && done < content.size()) {
			const ssize_t n = write(fd, content.data() + done, content.size() - done);
			if (n <= 0)
				break;
			done += static_cast<size_t>(n);
		}
		if (fd >= 0)
			close(fd);
		std::printf("writer wrote %zu of %zu\n", done, content.size());
	});
	X509_STORE *store = loadedStore(file);
	writer.join();
	verify(store, p.leaf, "fifo");
	X509_STORE_free(store);
	return 0;
}

int confined(const Pki &p)
{
	writeFile(path("ca.pem"), bundle(p));
	/* OpenSSL is at work before the program confines itself: its store code has run. */
	X509_STORE *warm = X509_STORE_new();
	X509_STORE_add_cert(warm, p.rootC);
	X509_STORE_free(warm);
	std::fflush(stdout);
	static const int allowed[] = {
		SYS_read, SYS_write, SYS_openat, SYS_newfstatat, SYS_fstat, SYS_close, SYS_lseek,
		SYS_brk, SYS_mmap, SYS_munmap, SYS_mremap, SYS_mprotect, SYS_madvise, SYS_futex,
		SYS_getrandom, SYS_rt_sigprocmask, SYS_exit_group, SYS_exit,
	};
	std::vector<sock_filter> program;
	program.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
	for (int nr : allowed) {
		program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), 0, 1));
		program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
	}
	program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
	sock_fprog filter = { static_cast<unsigned short>(program.size()), program.data() };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter) != 0)
		fail("seccomp");
	X509_STORE *store = loadedStore(path("ca.pem"));
	verify(store, p.leaf, "confined");
	std::fflush(stdout);
	_exit(0);
}

/* The program's own lookup method: answers from a second store it loaded. */
X509_STORE *g_source = nullptr;

int lookupBySubject(X509_LOOKUP *, X509_LOOKUP_TYPE type, const X509_NAME *name, X509_OBJECT *ret)
{
	STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(g_source);
	X509_OBJECT *found = X509_OBJECT_retrieve_by_subject(objects, type, const_cast<X509_NAME *>(name));
	X509 *x = found ? X509_OBJECT_get0_X509(found) : nullptr;
	std::printf("own lookup: source holds %d, found %d\n", sk_X509_OBJECT_num(objects), x != nullptr);
	/*
	 * As OpenSSL's own lookups answer: ret borrows the object (the source store keeps it),
	 * and the caller takes its own reference.
	 */
	if (!x || !X509_OBJECT_set1_X509(ret, x))
		return 0;
	X509_free(x);
	return 1;
}

int ownLookup(const Pki &p)
{
	writeFile(path("ca.pem"), bundle(p));
	g_source = loadedStore(path("ca.pem"));
	X509_LOOKUP_METHOD *method = X509_LOOKUP_meth_new("program's own");
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	X509_LOOKUP_meth_set_get_by_subject(method, lookupBySubject);
#else
	X509_LOOKUP_meth_set_get_by_subject(method, reinterpret_cast<X509_LOOKUP_get_by_subject_fn>(lookupBySubject));
#endif
	X509_STORE *store = X509_STORE_new();
	/* A store of its own with a file of its own, so that the shim has a lookup to run. */
	writeFile(path("other.pem"), pemOf(p.rootC));
	X509_STORE_load_locations(store, path("other.pem").c_str(), nullptr);
	X509_STORE_add_lookup(store, method);
	verify(store, p.leaf, "own lookup");
	X509_STORE_free(store);
	X509_STORE_free(g_source);
	X509_LOOKUP_meth_free(method);
	return 0;
}

int checkIssued(X509_STORE_CTX *ctx, X509 *x, X509 *issuer)
{
	static bool printed = false;
	if (!printed) {
		printed = true;
		std::printf("check_issued sees %d objects\n",
			    sk_X509_OBJECT_num(X509_STORE_get0_objects(X509_STORE_CTX_get0_store(ctx))));
	}
	return X509_check_issued(issuer, x) == X509_V_OK;
}

int checkIssuedCase(const Pki &p)
{
	writeFile(path("ca.pem"), bundle(p));
	X509_STORE *store = X509_STORE_new();
	X509_STORE_set_check_issued(store, checkIssued);
	std::printf("load %d\n", X509_STORE_load_locations(store, path("ca.pem").c_str(), nullptr));
	verify(store, p.leaf, "callback");
	X509_STORE_free(store);
	return 0;
}

/* Its second call comes from OpenSSL's walk over the candidates of one subject. */
int listingCheckIssued(X509_STORE_CTX *ctx, X509 *x, X509 *issuer)
{
	static int calls = 0;
	if (++calls == 2) {
		STACK_OF(X509_OBJECT) *objects = X509_STORE_get0_objects(X509_STORE_CTX_get0_store(ctx));
		std::printf("call 2 sees %d objects:", sk_X509_OBJECT_num(objects));
		for (int i = 0; i < sk_X509_OBJECT_num(objects); i++) {
			char name[64];
			X509_NAME_get_text_by_NID(X509_get_subject_name(X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i))),
						  NID_commonName, name, sizeof(name));
			std::printf(" %s", name);
		}
		std::printf("\n");
	}
	return X509_check_issued(issuer, x) == X509_V_OK;
}

int checkIssuedWalk(const Pki &p)
{
	X509 *expired = certificate("Root A", p.keyA, nullptr, nullptr, true, 10);
	X509_gmtime_adj(X509_getm_notBefore(expired), -2 * 86400);
	X509_gmtime_adj(X509_getm_notAfter(expired), -86400);
	if (!X509_sign(expired, p.keyA, EVP_sha256()))
		fail("signing");
	std::string file = pemOf(expired) + pemOf(p.rootA);
	for (const char *cn : { "R0", "R1", "R2", "R3", "R4", "R5" }) {
		/* Shorter names: X509_NAME_cmp puts them before "Root A". */
		X509 *root = certificate(cn, p.keyB, nullptr, nullptr, true, 20);
		file += pemOf(root);
		X509_free(root);
	}
	writeFile(path("ca.pem"), file);
	X509_STORE *store = X509_STORE_new();
	X509_STORE_set_check_issued(store, listingCheckIssued);
	std::printf("load %d\n", X509_STORE_load_locations(store, path("ca.pem").c_str(), nullptr));
	X509 *top = nullptr;
	verify(store, p.leaf, "walk", &top);
	if (top)
		std::printf("walk found the %s root A\n",
			    X509_cmp_current_time(X509_get0_notAfter(top)) > 0 ? "valid" : "expired");
	X509_free(top);
	X509_STORE_free(store);
	X509_free(expired);
	return 0;
}

int keptList(const Pki &p)
{
	writeFile(path("first.pem"), pemOf(p.rootB));
	writeFile(path("second.pem"), pemOf(p.rootA) + pemOf(p.rootC));
	X509_STORE *store = X509_STORE_new();
	STACK_OF(X509_OBJECT) *kept = X509_STORE_get0_objects(store);
	std::printf("before %d\n", sk_X509_OBJECT_num(kept));
	std::printf("load %d\n", X509_STORE_load_locations(store, path("first.pem").c_str(), nullptr));
	std::printf("kept after one load %d\n", sk_X509_OBJECT_num(kept));
	std::printf("load %d\n", X509_STORE_load_locations(store, path("second.pem").c_str(), nullptr));
	std::printf("kept after two loads %d\n", sk_X509_OBJECT_num(kept));
	verify(store, p.leaf, "kept");
	std::printf("kept after verify %d\n", sk_X509_OBJECT_num(kept));
	X509_STORE_free(store);
	return 0;
}

/*
 * A load made while this thread holds the store's lock (a hunt; a callback OpenSSL runs
 * under that lock would do the same): OpenSSL's adds cannot take the lock again, and the
 * load fails and trusts nothing (3.0 and 3.5).
 */
int lockedLoad(const Pki &p)
{
	writeFile(path("ca.pem"), bundle(p));
	X509_STORE *store = X509_STORE_new();
	const int locked = X509_STORE_lock(store);
	const int loaded = X509_STORE_load_locations(store, path("ca.pem").c_str(), nullptr);
	if (locked)
		X509_STORE_unlock(store);
	std::printf("locked load %d\n", loaded);
	printErrors("locked load");
	verify(store, p.leaf, "locked");
	X509_STORE_free(store);
	return 0;
}

/*
 * Loading compares certificates of one subject (X509_cmp), which makes their SHA-1
 * fingerprints: where SHA-1 cannot be fetched, that load leaves the errors.
 */
int twinsAfter(const Pki &p)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	EVP_PKEY *key = newKey();
	X509 *twin = certificate("Root A", key, nullptr, nullptr, true, 99);
	writeFile(path("ca.pem"), pemOf(twin) + bundle(p));
	X509_STORE *first = loadedStore(path("ca.pem"));
	EVP_set_default_properties(nullptr, "fips=yes");
	X509_STORE *second = loadedStore(path("ca.pem"));
	verify(second, p.leaf, "twins");
	printErrors("verify");
	EVP_set_default_properties(nullptr, "");
	X509_STORE_free(second);
	X509_STORE_free(first);
	X509_free(twin);
	EVP_PKEY_free(key);
#else
	(void)p;
	std::printf("no providers before 3.0\n");
#endif
	return 0;
}

int trailingBytes(const Pki &p)
{
	unsigned char *der = nullptr;
	const int n = i2d_X509(p.rootA, &der);
	std::string bytes(reinterpret_cast<char *>(der), static_cast<size_t>(n));
	OPENSSL_free(der);
	bytes += std::string("\x05\x00", 2);
	BIO *out = BIO_new(BIO_s_mem());
	PEM_write_bio(out, "CERTIFICATE", "", reinterpret_cast<const unsigned char *>(bytes.data()),
		      static_cast<long>(bytes.size()));
	char *data = nullptr;
	const long length = BIO_get_mem_data(out, &data);
	writeFile(path("ca.pem"), pemOf(p.rootB) + std::string(data, static_cast<size_t>(length)));
	BIO_free(out);
	X509_STORE *store = loadedStore(path("ca.pem"));
	verify(store, p.leaf, "trailing");
	listStore(store, "trailing");
	X509_STORE_free(store);
	return 0;
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc != 3) {
		std::fprintf(stderr, "usage: ca_trust_cases DIR CASE\n");
		return 2;
	}
	g_dir = argv[1];
	const std::map<std::string, int (*)(const Pki &)> cases = {
		{ "reject-add", rejectAdd },       { "trust-add", trustAdd },
		{ "reject-clear", rejectClear },   { "alias", alias },
		{ "chain-reject", chainReject },   { "rewrite-mmap", rewriteMmap },
		{ "make-pki", makePkiFiles },      { "fifo", fifo },
		{ "seccomp", confined },           { "own-lookup", ownLookup },
		{ "check-issued", checkIssuedCase }, { "check-issued-walk", checkIssuedWalk },
		{ "kept-list", keptList },         { "locked-load", lockedLoad },
		{ "trailing-bytes", trailingBytes }, { "twins-after", twinsAfter },
	};
	for (const char *change : { "unload-default", "properties-after", "fips-after", "default-context",
				    "config-after" })
		if (std::string(argv[2]) == change)
			return changedAfter(change);
	if (std::string(argv[2]) == "base-provider")
		return baseProvider();
	if (std::string(argv[2]) == "properties" || std::string(argv[2]) == "properties-later")
		return properties(std::string(argv[2]) == "properties-later");
	const auto found = cases.find(argv[2]);
	if (found == cases.end()) {
		std::fprintf(stderr, "ca_trust_cases: no case %s\n", argv[2]);
		return 2;
	}
	const Pki pki = makePki();
	setvbuf(stdout, nullptr, _IOLBF, 0);
	const int status = found->second(pki);
	for (X509 *x : { pki.rootA, pki.rootB, pki.rootC, pki.leaf })
		X509_free(x);
	for (EVP_PKEY *key : { pki.keyA, pki.keyB, pki.keyC, pki.leafKey })
		EVP_PKEY_free(key);
	return status;
}
