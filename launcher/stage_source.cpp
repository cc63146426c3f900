// The root's side of file staging: prepares the index, then streams it and the staged contents down the tree.
#include "stage_source.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "report_files.hpp"
#include "util/read_file.hpp"
#include "wire/messages.hpp"

namespace canopy {
namespace {

bool covered_by(const std::string& prefix, const std::vector<std::string>& prefixes)
{
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string& known) { return stage::is_under(prefix, known); });
}

} // namespace

bool stages_on_demand(const StageSettings& settings)
{
    std::error_code ignored;
    return settings.manifest.empty() || !std::filesystem::exists(settings.manifest, ignored);
}

Result<PreparedStage> prepare_stage(const StageSettings& settings)
{
    bool learn = !settings.manifest.empty() && stages_on_demand(settings);
    if (learn && settings.prefixes.empty())
        return make_error("stage manifest {} does not exist; name the directories to stage with --stage, and canopy "
                          "writes it at the end of the job",
                          settings.manifest);
    if (learn) {
        // Found out now, not after the whole job has run.
        if (auto writable = check_report_file(settings.manifest); !writable)
            return make_error("stage manifest {} does not exist, and {}; give a writable path to learn it, or an "
                              "existing manifest",
                              settings.manifest, writable.error().message);
    }
    if (stages_on_demand(settings)) {
        // On demand: the index holds the prefixes and their listings only (a handful of operations, where a walk
        // of the prefixes costs one per file); the nodes fetch everything else through the tree as ranks ask.
        std::vector<stage::PathRequest> requests;
        for (const auto& prefix : settings.prefixes)
            requests.push_back({prefix, false});
        auto index = stage::build_index(requests, stage::BuildOptions{settings.prefixes, true});
        if (!index)
            return index.error();
        return PreparedStage{std::move(*index), {}, learn ? settings.manifest : std::string()};
    }

    auto index = stage::Index::load(settings.manifest);
    if (!index)
        return index.error();
    auto recorded = index->prefixes();
    for (const auto& prefix : settings.prefixes)
        if (!covered_by(prefix, recorded))
            return make_error("stage manifest {} does not cover {}; record it again with --stage {}",
                              settings.manifest, prefix, prefix);
    auto changes = stage::validate(*index);
    if (changes.empty())
        return PreparedStage{std::move(*index), {}, {}};
    auto refreshed = stage::refresh(*index);
    if (!refreshed)
        return make_error("stage manifest {} is stale and could not be refreshed: {}", settings.manifest,
                          refreshed.error().message);
    const auto& first = changes.front();
    std::string warning = fmt::format(
        "stage manifest {} is stale: {} path{} changed since it was recorded (first: {} {}{}); staging a refreshed "
        "index (record it again to skip this)",
        settings.manifest, changes.size(), changes.size() == 1 ? "" : "s", first.path, stage::to_string(first.kind),
        first.detail.empty() ? "" : ", " + first.detail);
    return PreparedStage{std::move(*refreshed), std::move(warning), {}};
}

Result<stage::Index> learn_manifest(const std::string& file, const std::vector<std::string>& prefixes,
                                    const std::map<std::string, stage::FetchAnswer>& answers)
{
    std::vector<stage::PathRequest> requests;
    for (const auto& [path, answer] : answers)
        requests.push_back({path, answer.content()});
    stage::BuildOptions options{prefixes, true, [&answers](const std::string& path) -> const stage::KnownPath* {
                                    auto it = answers.find(path);
                                    return it == answers.end() ? nullptr : &it->second;
                                }};
    auto index = stage::build_index(requests, options);
    if (!index)
        return make_error("cannot learn the stage manifest {}: {}", file, index.error().message);
    if (auto saved = index->save(file); !saved)
        return make_error("cannot write the stage manifest {}: {}", file, saved.error().message);
    return index;
}

StageSender::StageSender(boost::asio::io_context& io, BulkRoute& children, const stage::Index& index)
    : timer_(io), children_(children), index_(index), files_(index.content_files())
{
    progress_.files_total = files_.size();
    progress_.bytes_total = index.blob().size();
    for (const auto& file : files_)
        progress_.bytes_total += static_cast<std::uint64_t>(file.size);
}

void StageSender::start(std::function<void(Status)> done)
{
    done_ = std::move(done);
    std::vector<std::string> paths;
    paths.reserve(files_.size());
    for (const auto& file : files_)
        paths.push_back(file.mirror);
    opener_ = std::make_unique<stage::OpenAhead>(directories_, std::move(paths));
    pump();
}

void StageSender::stop()
{
    stopped_ = true;
    timer_.cancel();
}

void StageSender::pump()
{
    while (!stopped_ && done_) {
        if (index_sent_ && progress_.files_sent == files_.size()) {
            finish({});
            return;
        }
        // The index is not held back by what the links have queued: every node waits for it before its ranks
        // start, while the read-ahead of a first job may fill the links for seconds.
        if (index_sent_ && children_.max_queued_bytes() > max_queued_bytes) {
            // The slowest child is behind: look again shortly rather than queue without bound.
            timer_.expires_after(std::chrono::milliseconds(1));
            timer_.async_wait([this](const boost::system::error_code& error) {
                if (!error)
                    pump();
            });
            return;
        }
        if (auto sent = send_next_chunk(); !sent) {
            finish(sent);
            return;
        }
    }
}

Status StageSender::send_next_chunk()
{
    if (!index_sent_) {
        const auto& blob = index_.blob();
        std::size_t size = std::min(chunk_bytes, blob.size() - index_offset_);
        wire::StageIndex message;
        message.chunk = std::span(blob).subspan(index_offset_, size);
        index_offset_ += size;
        message.more = index_offset_ < blob.size();
        index_sent_ = !message.more;
        progress_.bytes_sent += size;
        children_.broadcast(wire::to_frame(message), true);
        return {};
    }

    const auto& file = files_[progress_.files_sent];
    if (!file_) {
        int error = 0;
        file_.reset(opener_->take(progress_.files_sent, error));
        if (!file_)
            return make_error("cannot read staged file {} at the root: {}", file.mirror, std::strerror(error));
        file_offset_ = 0;
    }
    auto remaining = static_cast<std::uint64_t>(file.size) - file_offset_;
    wire::StageContent message;
    message.file = static_cast<std::uint32_t>(progress_.files_sent);
    auto chunk = std::span(chunk_buffer_).first(static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes,
                                                                                                 remaining)));
    std::size_t filled = read_at(file_.get(), file_offset_, chunk);
    if (filled < chunk.size())
        return make_error("staged file {} changed while it was being sent ({} of {} bytes read); run the job again",
                          file.mirror, file_offset_ + filled, file.size);
    message.chunk = chunk;
    file_offset_ += filled;
    progress_.bytes_sent += filled;
    message.last = file_offset_ == static_cast<std::uint64_t>(file.size);
    if (message.last) {
        file_.reset();
        ++progress_.files_sent;
    }
    children_.broadcast(wire::to_frame(message));
    return {};
}

void StageSender::finish(Status status)
{
    file_.reset();
    if (auto done = std::exchange(done_, nullptr))
        done(std::move(status));
}

} // namespace canopy
