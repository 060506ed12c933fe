#include "pki.h"

#include <stdexcept>

#include "process.h"

namespace testsupport {

namespace {

void openssl(const TempDir &dir, std::vector<std::string> arguments)
{
	Command command;
	command.argv = { "openssl" };
	command.argv.insert(command.argv.end(), arguments.begin(), arguments.end());
	command.cwd = dir.path();
	command.stderrPath = dir.file("openssl.log");
	if (run(command, 60000) != 0)
		throw std::runtime_error("openssl " + arguments[0] + " failed: " +
					 readFile(command.stderrPath));
}

/* EC keys: handshakes in the stress test cost little, even under ThreadSanitizer. */
const std::vector<std::string> kNewKey = { "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
					   "-nodes" };

std::string makeCa(const TempDir &dir, const std::string &name)
{
	std::vector<std::string> arguments = { "req", "-x509" };
	arguments.insert(arguments.end(), kNewKey.begin(), kNewKey.end());
	arguments.insert(arguments.end(), { "-keyout", name + ".key", "-out", name + ".pem", "-days", "30",
					    "-subj", "/CN=tlstune test " + name });
	openssl(dir, arguments);
	return dir.file(name + ".pem");
}

/* A server certificate for names, issued by ca, valid for days from now. */
Certificate makeServer(const TempDir &dir, const std::string &name, const std::string &ca,
		       const std::string &names, const std::string &days)
{
	std::vector<std::string> request = { "req" };
	request.insert(request.end(), kNewKey.begin(), kNewKey.end());
	request.insert(request.end(), { "-keyout", name + ".key", "-out", name + ".csr", "-subj",
					"/CN=" + name });
	openssl(dir, request);
	writeFile(dir.file(name + ".ext"), "subjectAltName=" + names + "\n");
	openssl(dir, { "x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
		       "-days", days, "-extfile", name + ".ext", "-out", name + ".pem" });
	return { dir.file(name + ".pem"), dir.file(name + ".key") };
}

/*
 * The same, valid for one day in 2020. "x509 -days -1" made one that ended before it began,
 * which OpenSSL 3.5 refuses to make; "openssl ca" takes both dates in every version.
 */
Certificate makeExpired(const TempDir &dir, const std::string &name, const std::string &ca,
			const std::string &names)
{
	std::vector<std::string> request = { "req" };
	request.insert(request.end(), kNewKey.begin(), kNewKey.end());
	request.insert(request.end(), { "-keyout", name + ".key", "-out", name + ".csr", "-subj",
					"/CN=" + name });
	openssl(dir, request);
	writeFile(dir.file(name + ".ext"), "subjectAltName=" + names + "\n");
	writeFile(dir.file(name + ".index"), "");
	writeFile(dir.file(name + ".serial"), "01\n");
	writeFile(dir.file(name + ".cnf"), "[ca]\ndefault_ca = issuer\n"
					   "[issuer]\ndatabase = " + name + ".index\n"
					   "serial = " + name + ".serial\n"
					   "new_certs_dir = .\ndefault_md = sha256\n"
					   "policy = any\n[any]\ncommonName = supplied\n");
	openssl(dir, { "ca", "-batch", "-notext", "-config", name + ".cnf",
		       "-cert", ca + ".pem", "-keyfile", ca + ".key", "-in", name + ".csr",
		       "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
		       "-extfile", name + ".ext", "-out", name + ".pem" });
	return { dir.file(name + ".pem"), dir.file(name + ".key") };
}

} /* namespace */

const Pki &pki()
{
	static TempDir dir;
	static const Pki made = [] {
		Pki p;
		p.dir = dir.path();
		p.ca1 = makeCa(dir, "ca1");
		p.ca2 = makeCa(dir, "ca2");
		const std::string local = "DNS:localhost,IP:127.0.0.1";
		p.server = makeServer(dir, "server", "ca1", local, "2");
		p.expired = makeExpired(dir, "expired", "ca1", local);
		p.otherHost = makeServer(dir, "other", "ca1", "DNS:other.example", "2");
		p.serverCa2 = makeServer(dir, "server2", "ca2", local, "2");
		return p;
	}();
	return made;
}

} /* namespace testsupport */
