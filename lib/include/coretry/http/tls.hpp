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

} // namespace coretry::http

#endif
