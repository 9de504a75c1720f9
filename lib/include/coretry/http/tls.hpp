#ifndef CORETRY_HTTP_TLS_HPP
#define CORETRY_HTTP_TLS_HPP
/// @file
/// A TLS client's files and context under the HTTP client's names: the
/// ones of coretry/net/tls.hpp, which coretry::http and coretry::redis share.

#include <coretry/net/tls.hpp>

namespace coretry::http {

using net::ca_file_problem;
using net::expect_peer;
using net::make_client_context;
using net::tls_files;
using net::tls_files_problem;

} // namespace coretry::http

#endif
