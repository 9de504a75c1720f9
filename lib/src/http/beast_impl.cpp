// The one translation unit that compiles Beast's separately compiled parts
// (BOOST_BEAST_SEPARATE_COMPILATION is public on coretry::http). Asio SSL's
// are coretry::net's (src/net/asio_ssl_impl.cpp).
#include <boost/beast/src.hpp>
