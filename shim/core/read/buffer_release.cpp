#include "buffer_release.h"

#include "core/openssl_api.h"

namespace tlstune {

thread_local int BufferRelease::calls_ = 0;

void BufferRelease::begin() noexcept
{
	/*
	 * Set by a call a longjmp left: this one takes it over. Set by the program: its own
	 * mode, which OpenSSL acts on already.
	 */
	if (!connection_.releasing()) {
		if (api_.SSL_ctrl(ssl_, SSL_CTRL_MODE, 0, nullptr) & SSL_MODE_RELEASE_BUFFERS)
			return;
		api_.SSL_ctrl(ssl_, SSL_CTRL_MODE, SSL_MODE_RELEASE_BUFFERS, nullptr);
		connection_.setReleasing(true);
	}
	calls_++;
	began_ = true;
}

void BufferRelease::end() noexcept
{
	calls_--;
	if (!connection_.releasing())
		return;
	api_.SSL_ctrl(ssl_, SSL_CTRL_CLEAR_MODE, SSL_MODE_RELEASE_BUFFERS, nullptr);
	connection_.setReleasing(false);
}

long BufferRelease::programsMode(Connection &connection, long larg, long result) noexcept
{
	if (!connection.releasing())
		return result;
	if (larg & SSL_MODE_RELEASE_BUFFERS) {
		connection.setReleasing(false);
		return result;
	}
	return result & ~static_cast<long>(SSL_MODE_RELEASE_BUFFERS);
}

} /* namespace tlstune */
