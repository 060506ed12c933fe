/*
 * A program linked with libconstructor_tls.so, whose constructor talks TLS before main():
 * main() does the same exchange again. Usage: EXCHANGE_PORT=N SSL_CERT_FILE=CA
 * constructor_client; the server (tls_server --echo --connections 2) echoes each one.
 */

int exchange(const char *when);

int main()
{
	return exchange("main");
}
