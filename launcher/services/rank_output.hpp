// The ranks' output at the root: what every rank writes, printed on the launcher's stdout and stderr in whole lines
// (OutputLines), written on a thread of its own (OutputWriter), with the daemons held back while the reader is
// slow (OutputBackpressure). canopy's own lines go through it too, so they never split a rank's line.
#pragma once

#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "output_backpressure.hpp"
#include "output_lines.hpp"
#include "output_writer.hpp"
#include "position/tree_position.hpp"
#include "services/root_service.hpp"

namespace canopy {

class RankOutput : public RootService {
public:
    // `label`: each line starts with its rank (--label).
    RankOutput(boost::asio::io_context& io, TreePosition& position, bool label, RootControl& root);

    // One of canopy's own lines on stderr (with its "canopy: " and newline), after any rank's open line there.
    void print_own_line(std::string line);
    // The end of the job: the ranks' last open lines, and everything still queued, written out; a write that
    // failed late still ends the job's success.
    void finish();
    // The staging progress bar shares the launcher's stderr.
    OutputWriter& writer() { return writer_; }

private:
    void print(const wire::Output& output);
    void arm_wait_timer();
    // Tells the daemons whose long open line alone may go on, on each stream (OutputLines::line_hold).
    void hold_lines();
    // A write to the launcher's stdout or stderr failed (OutputWriter::on_failed): one line, and the job ends.
    void write_failed(int fd, int error);

    boost::asio::io_context& io_;
    TreePosition& position_;
    RootControl& root_;
    const bool label_;
    OutputWriter writer_;   // never written on the io thread
    OutputLines lines_;     // whose line is open on each stream, and what waits behind it
    boost::asio::steady_timer wait_timer_;   // lets output through that waited its time behind an open line
    OutputBackpressure backpressure_{io_, writer_};   // after writer_, which it watches
    bool failure_reported_[2] = {false, false};   // stdout, stderr
};

} // namespace canopy
