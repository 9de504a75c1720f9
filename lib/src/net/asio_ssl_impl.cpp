// The one translation unit that compiles Asio SSL's separately compiled parts
// (BOOST_ASIO_SEPARATE_COMPILATION is a public definition of coretry, which
// coretry::net links): coretry::net's TLS and everything built on it (the
// HTTP client, the Redis reconciler) use them from here.
#include <boost/asio/ssl/impl/src.hpp>
