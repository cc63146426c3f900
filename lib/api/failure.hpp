// Failure and Outcome<T>: libcanopy's errors as values, carrying the status code the C ABI returns.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include <canopy/canopy.h>

namespace canopy::api {

// A failed call: the CANOPY_ERR_* code and a one-line message for canopy_last_error().
struct Failure {
    int code = CANOPY_ERR_INVALID;
    std::string message;
};

template <typename... Args>
Failure fail(int code, fmt::format_string<Args...> format, Args&&... args)
{
    return Failure{code, fmt::format(format, std::forward<Args>(args)...)};
}

// A value or a Failure (the canopy::Result pattern, plus the status code applications branch on).
template <typename T>
class [[nodiscard]] Outcome {
public:
    Outcome(T value) : state_(std::move(value)) {}
    Outcome(Failure failure) : state_(std::move(failure)) {}

    bool ok() const { return std::holds_alternative<T>(state_); }
    explicit operator bool() const { return ok(); }
    T& value() & { return std::get<T>(state_); }
    T&& value() && { return std::get<T>(std::move(state_)); }
    T& operator*() & { return value(); }
    T* operator->() { return &value(); }
    const Failure& failure() const { return std::get<Failure>(state_); }

private:
    std::variant<T, Failure> state_;
};

// Success or a Failure.
struct Done {};
using Checked = Outcome<Done>;
inline Checked done() { return Done{}; }

} // namespace canopy::api
