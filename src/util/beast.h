// util: Boost.Asio and Boost.Beast, included in the order Boost 1.74 needs.
#pragma once

// clang-format off
#include <utility>  // asio/awaitable.hpp uses std::exchange without including <utility>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
// clang-format on
