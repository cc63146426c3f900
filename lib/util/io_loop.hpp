// Running a binary's event loop so that a thread it cannot start fails the job instead of aborting the process.
#pragma once

#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>

namespace canopy {

// Runs `io` until it has no more work. A handler that could not start a thread (std::thread throws
// std::system_error, as at the user's process limit) hands `failed` one line saying why, and the loop goes on: the
// binary then ends the job as after any other failure, its daemons and ranks with it, instead of aborting.
void run_io_loop(boost::asio::io_context& io, const std::function<void(const std::string& why)>& failed);

} // namespace canopy
