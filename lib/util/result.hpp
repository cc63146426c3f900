// Result<T>: a value or an Error, so failures travel as values inside canopy (STYLE habit 4).
#pragma once

#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace canopy {

// A failure that a user can read: what failed, where (node, rank, file), and what to do.
struct Error {
    std::string message;
    int code = 0;   // a status code where an interface returns one (libcanopy's CANOPY_ERR_*); 0: none
};

template <typename... Args>
Error make_error(fmt::format_string<Args...> format, Args&&... args)
{
    return Error{fmt::format(format, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : state_(std::move(value)) {}
    Result(Error error) : state_(std::move(error)) {}

    bool ok() const { return std::holds_alternative<T>(state_); }
    explicit operator bool() const { return ok(); }

    T& value() & { return std::get<T>(state_); }
    const T& value() const& { return std::get<T>(state_); }
    T&& value() && { return std::get<T>(std::move(state_)); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }

    const Error& error() const { return std::get<Error>(state_); }

private:
    std::variant<T, Error> state_;
};

// Success or an Error, for operations that return nothing.
class [[nodiscard]] Status {
public:
    Status() = default;
    Status(Error error) : error_(std::move(error)), failed_(true) {}

    bool ok() const { return !failed_; }
    explicit operator bool() const { return ok(); }
    const Error& error() const { return error_; }

private:
    Error error_;
    bool failed_ = false;
};

} // namespace canopy
