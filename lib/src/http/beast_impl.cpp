// The one translation unit that compiles Beast's and Asio SSL's separately
// compiled parts (BOOST_BEAST_SEPARATE_COMPILATION is public on coretry::http).
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
