// A job's host names by node index, kept as the compressed hostlist: a daemon names a few hosts without
// expanding all N.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "hosts/hostlist.hpp"
#include "util/result.hpp"

namespace canopy {

class HostNames {
public:
    HostNames() = default;
    explicit HostNames(const std::vector<std::string>& names);
    // The wire form, with expand_hostlist's checks and errors; no name is made.
    static Result<HostNames> parse(std::string_view list);

    std::size_t size() const { return ends_.empty() ? 0 : ends_.back(); }
    bool empty() const { return size() == 0; }
    // The i-th name, made on demand in O(log items + parts).
    std::string operator[](std::size_t index) const;
    // As operator[], but throws std::out_of_range past the end.
    std::string at(std::size_t index) const;
    // Every name, for the few users that need them all.
    std::vector<std::string> expand() const;
    // compress_hostlist of the names: the wire form.
    const std::string& compressed() const { return text_; }

    friend bool operator==(const HostNames& a, const HostNames& b);

private:
    HostNames(std::string text, std::vector<HostItem> items);
    void count_ends();

    std::string text_;
    std::vector<HostItem> items_;
    std::vector<std::size_t> ends_; // names in items_[0..i]
};

} // namespace canopy
