#ifndef CORETRY_NET_TLS_HPP
#define CORETRY_NET_TLS_HPP
/// @file
/// A TLS client's files checked and made into a context, and a stream's
/// handshake prepared for a host, as coretry::http and coretry::redis do.

#include <coretry/net/tls_files.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/system/error_code.hpp>

#include <optional>
#include <string>

namespace coretry::net {

/// Why `path` cannot serve as a CA file (the HTTP client's
/// client_options::ca_file, the Redis reconciler's tls.ca_file), or nullopt when it
/// can: the file cannot be read (with the system's reason), or it holds no
/// PEM certificate that loads. The message names the file. The client checks
/// this when it is made; a program can check a user's option the same way
/// before it makes one, so that a wrong file is bad input rather than a TLS
/// failure on every attempt.
std::optional<std::string> ca_file_problem(const std::string& path);

/// Why `files` cannot make a client context, or nullopt when they can: a CA
/// file as ca_file_problem says, a key without its certificate, a file that
/// cannot be read (with the system's reason) or holds no PEM certificate or
/// key, an encrypted key whose password is missing or wrong, a key that does
/// not belong to the certificate. The message names the file, never its
/// content or the password.
std::optional<std::string> tls_files_problem(const tls_files& files);

/// A client context: TLS 1.2 at least, the system's trust store plus
/// `files.ca_file`, the client certificate when there is one, and peer
/// verification unless `verify_peer` is false. Throws std::invalid_argument
/// with tls_files_problem's message, boost::system::system_error when
/// OpenSSL fails otherwise.
boost::asio::ssl::context make_client_context(const tls_files& files, bool verify_peer = true);

/// Prepares `stream`'s client handshake for `host` (a DNS name or an IP
/// address): SNI for a name (never for an address, RFC 6066 §3), and the
/// server's certificate checked against it by OpenSSL's verification (a
/// mismatch fails the handshake with its own verify result). An error when
/// OpenSSL refuses.
boost::system::error_code expect_peer(boost::asio::ssl::stream<boost::asio::ip::tcp::socket>& stream,
                                      const std::string& host);

} // namespace coretry::net

#endif
