#ifndef CORETRY_NET_TLS_FILES_HPP
#define CORETRY_NET_TLS_FILES_HPP
/// @file
/// The files a TLS client may be given (tls_files), without TLS itself:
/// options that name them need not bring in OpenSSL.

#include <string>

namespace coretry::net {

/// What a TLS client may be given besides the system's trust store. The
/// HTTP client's and the Redis reconciler's TLS settings are this type.
struct tls_files {
  /// PEM CA certificates trusted besides the system's store; empty: the
  /// system's store only.
  std::string ca_file;
  /// A PEM client certificate (chain), presented when the server asks for
  /// one; empty: none.
  std::string cert_file;
  /// The client certificate's private key (PEM); empty: it is in cert_file
  /// (the HTTP client), or refused with a cert_file (the Redis reconciler,
  /// as redis-cli's --cert and --key: a certificate comes with its key file).
  std::string key_file;
  /// The key's password when it is encrypted; empty: none.
  std::string key_password;
};

} // namespace coretry::net

#endif
