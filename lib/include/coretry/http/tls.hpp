#ifndef CORETRY_HTTP_TLS_HPP
#define CORETRY_HTTP_TLS_HPP

#include <optional>
#include <string>

namespace coretry::http {

/// Why `path` cannot serve as client_options::ca_file, or nullopt when it
/// can: the file cannot be read (with the system's reason), or it holds no
/// PEM certificate that loads. The message names the file. The client checks
/// this when it is made; a program can check a user's option the same way
/// before it makes one, so that a wrong file is bad input rather than a TLS
/// failure on every attempt.
std::optional<std::string> ca_file_problem(const std::string& path);

/// Why `certificate_file` and `private_key_file` (empty: the key is in the
/// certificate's file) cannot serve as a client certificate, or nullopt when
/// they can: a file that cannot be read (with the system's reason), no PEM
/// certificate in the first, no PEM private key in the second (or a wrong
/// password for an encrypted one), or a key that does not belong to the
/// certificate. The message names the file, never the password.
std::optional<std::string> client_certificate_problem(const std::string& certificate_file,
                                                      const std::string& private_key_file,
                                                      const std::string& private_key_password);

} // namespace coretry::http

#endif
