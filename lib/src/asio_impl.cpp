// The one translation unit that compiles Asio's separately compiled parts
// (BOOST_ASIO_SEPARATE_COMPILATION is a public definition of coretry).
#include <boost/asio/impl/src.hpp>
