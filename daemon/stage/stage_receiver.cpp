// A node's side of file staging: index and contents from the parent into the node cache.
#include "stage_receiver.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "stage/permission.h"
#include "wire/messages.hpp"

namespace canopy {

bool StageReceiver::knows_executable(const std::string& path) const
{
    if (!complete_ || !index_)
        return false;
    auto entry = index_->find(path);
    return entry && executable(entry->facts);
}

bool StageReceiver::staged(const std::string& path) const
{
    if (!complete_ || !index_)
        return false;
    auto prefixes = index_->prefixes();
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string& prefix) { return stage::is_under(path, prefix); });
}

bool StageReceiver::executable(const canopy_stage_path_facts& facts)
{
    if (facts.stat_errno != 0 || !S_ISREG(facts.stat.mode))
        return false;
    gid_t groups[64];
    canopy_stage_caller self{::getuid(), ::getgid(), groups, std::max(0, ::getgroups(64, groups))};
    return canopy_stage_permitted(&facts.stat, X_OK, &self);
}

Status StageReceiver::take(const wire::Frame& frame)
{
    if (complete_ || ready_to_install())
        return make_error("stage data arrived after the last file for the cache in {}", dir_);
    if (frame.type == static_cast<std::uint8_t>(wire::MessageType::stage_index)) {
        auto message = wire::decode_frame<wire::StageIndex>(frame);
        if (!message)
            return message.error();
        return take_index(message->more, message->chunk);
    }
    auto message = wire::decode_frame<wire::StageContent>(frame);
    if (!message)
        return message.error();
    return take_content(message->file, message->last, message->chunk);
}

Status StageReceiver::take_index(bool more, std::span<const std::uint8_t> chunk)
{
    if (index_)
        return make_error("a second stage index arrived for {}", dir_);
    index_blob_.insert(index_blob_.end(), chunk.begin(), chunk.end());
    if (more)
        return {};
    auto index = stage::Index::from_blob(std::vector<unsigned char>(index_blob_.begin(), index_blob_.end()),
                                         "the stage index from the parent");
    index_blob_.clear();
    index_blob_.shrink_to_fit();
    if (!index)
        return index.error();
    auto cache = stage::NodeCache::open(dir_);
    if (!cache)
        return cache.error();
    files_ = index->content_files();
    index_.emplace(std::move(*index));
    cache_.emplace(std::move(*cache));
    return {};
}

Status StageReceiver::take_content(std::uint32_t file, bool last, std::span<const std::uint8_t> chunk)
{
    if (!index_)
        return make_error("staged file content arrived before the stage index");
    if (file != next_file_ || file >= files_.size())
        return make_error("staged file {} arrived out of order (expected {} of {})", file, next_file_, files_.size());
    if (!writer_) {
        auto writer = cache_->begin_content(files_[file]);
        if (!writer)
            return writer.error();
        writer_.emplace(std::move(*writer));
    }
    if (auto appended = writer_->append(chunk); !appended)
        return appended;
    content_bytes_ += chunk.size();
    if (!last)
        return {};
    auto committed = writer_->commit();
    writer_.reset();
    if (!committed)
        return committed;
    ++next_file_;
    return {};
}

Status StageReceiver::install() { return cache_->install_index(*index_); }

} // namespace canopy
