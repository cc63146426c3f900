#include "util/io_loop.hpp"

#include <cerrno>
#include <system_error>

#include <fmt/format.h>

#include "util/limit_note.hpp"

namespace canopy {

void run_io_loop(boost::asio::io_context& io, const std::function<void(const std::string& why)>& failed)
{
    for (;;) {
        try {
            io.run();
            return;
        } catch (const std::system_error& error) {
            if (error.code() == std::errc::resource_unavailable_try_again)
                failed(fmt::format("cannot start a thread: {}{}", error.code().message(),
                                   limit_note(EAGAIN)));
            else
                failed(fmt::format("a system call failed: {}", error.what()));
        }
    }
}

} // namespace canopy
