// What a compiled Python module imports as it runs: its code objects read from marshal's format, and their
// bytecode searched for IMPORT_NAME.
#include "stage_tree/python_imports.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <set>

#include "util/read_file.hpp"

namespace canopy::stage {
namespace {

constexpr std::size_t max_pyc_bytes = 64 << 20;
constexpr int max_depth = 200;   // marshal's own limit is 2000; a module's objects nest far less
constexpr std::size_t header_bytes = 16;

// The releases whose bytecode this reads, by magic number. 3.8 to 3.10 write a code object's fields in one
// order, 3.11 and 3.12 in another; all of them have LOAD_CONST 100, IMPORT_NAME 108 and EXTENDED_ARG 144.
enum class CodeLayout { before_3_11, from_3_11 };

std::optional<CodeLayout> layout_of(std::uint16_t magic)
{
    switch (magic) {
    case 3413:   // 3.8
    case 3425:   // 3.9
    case 3439:   // 3.10
        return CodeLayout::before_3_11;
    case 3495:   // 3.11
    case 3531:   // 3.12
        return CodeLayout::from_3_11;
    default:
        return std::nullopt;
    }
}

constexpr std::uint8_t load_const = 100;
constexpr std::uint8_t import_name = 108;
constexpr std::uint8_t extended_arg = 144;
constexpr std::uint8_t cache_entry = 0;   // 3.11's inline caches, between instructions
constexpr std::uint32_t co_newlocals = 0x2;   // a function's code, not a module's or a class body's

// What of a marshalled object the search needs; the rest is read past.
struct Object {
    enum class Kind { other, null, integer, text, sequence, code } kind = Kind::other;
    std::int64_t integer = 0;
    std::string text;
    std::vector<const Object*> items;   // a tuple's, list's or set's
    // A code object's:
    std::uint32_t flags = 0;
    const Object* bytecode = nullptr;
    const Object* consts = nullptr;
    const Object* names = nullptr;
};

class Unmarshal {
public:
    Unmarshal(const std::string& data, std::size_t at, CodeLayout layout)
        : at_(reinterpret_cast<const std::uint8_t*>(data.data()) + at),
          end_(reinterpret_cast<const std::uint8_t*>(data.data()) + data.size()), layout_(layout)
    {
    }

    // The next object; null when malformed.
    const Object* object(int depth = 0)
    {
        if (depth > max_depth)
            return nullptr;
        std::uint8_t code = 0;
        if (!byte(code))
            return nullptr;
        const bool remembered = code & 0x80;   // FLAG_REF: later objects may refer back to it
        const char type = static_cast<char>(code & 0x7f);
        if (type == 'r') {
            std::uint32_t index = 0;
            if (!u32(index) || index >= refs_.size())
                return nullptr;
            return refs_[index];
        }
        // Its place among the references is taken before its contents are read, as marshal writes it.
        Object& out = objects_.emplace_back();
        if (remembered)
            refs_.push_back(&out);
        return fill(out, type, depth) ? &out : nullptr;
    }

private:
    bool fill(Object& out, char type, int depth)
    {
        switch (type) {
        case '0':
            out.kind = Object::Kind::null;
            return true;
        case 'N': case 'F': case 'T': case 'S': case '.':
            return true;
        case 'i': {
            std::uint32_t value = 0;
            if (!u32(value))
                return false;
            out.kind = Object::Kind::integer;
            out.integer = static_cast<std::int32_t>(value);
            return true;
        }
        case 'I':
            return skip(8);
        case 'l': {   // digits of 15 bits, two bytes each
            std::uint32_t count = 0;
            if (!u32(count))
                return false;
            auto digits = std::abs(static_cast<std::int64_t>(static_cast<std::int32_t>(count)));   // signed
            return skip(2 * static_cast<std::size_t>(digits));
        }
        case 'g':
            return skip(8);
        case 'y':
            return skip(16);
        case 'f':
            return short_skip();
        case 'x':
            return short_skip() && short_skip();
        case 's': case 'u': case 't': case 'a': case 'A': {
            std::uint32_t size = 0;
            out.kind = Object::Kind::text;
            return u32(size) && take(size, out.text);
        }
        case 'z': case 'Z': {
            std::uint8_t size = 0;
            out.kind = Object::Kind::text;
            return byte(size) && take(size, out.text);
        }
        case ')': {
            std::uint8_t count = 0;
            return byte(count) && items(out, count, depth);
        }
        case '(': case '[': case '<': case '>': {
            std::uint32_t count = 0;
            return u32(count) && items(out, count, depth);
        }
        case '{':
            for (;;) {
                const Object* key = object(depth + 1);
                if (!key)
                    return false;
                if (key->kind == Object::Kind::null)
                    return true;
                if (!object(depth + 1))
                    return false;
            }
        case 'c':
            return code(out, depth);
        default:
            return false;
        }
    }

    bool code(Object& out, int depth)
    {
        out.kind = Object::Kind::code;
        // argcount, posonlyargcount, kwonlyargcount, [nlocals,] stacksize, flags
        const int counts = layout_ == CodeLayout::before_3_11 ? 6 : 5;
        std::uint32_t value = 0;
        for (int i = 0; i < counts; ++i)
            if (!u32(value))
                return false;
        out.flags = value;
        out.bytecode = object(depth + 1);
        out.consts = object(depth + 1);
        out.names = object(depth + 1);
        if (!out.bytecode || !out.consts || !out.names)
            return false;
        // 3.8-3.10: varnames, freevars, cellvars, filename, name, firstlineno, lnotab.
        // 3.11-3.12: localsplusnames, localspluskinds, filename, name, qualname, firstlineno, linetable,
        // exceptiontable.
        const int after_line = layout_ == CodeLayout::before_3_11 ? 1 : 2;
        for (int i = 0; i < 5; ++i)
            if (!object(depth + 1))
                return false;
        if (!u32(value))
            return false;
        for (int i = 0; i < after_line; ++i)
            if (!object(depth + 1))
                return false;
        return true;
    }

    bool items(Object& out, std::uint32_t count, int depth)
    {
        if (count > static_cast<std::size_t>(end_ - at_))   // each item takes a byte at least
            return false;
        out.kind = Object::Kind::sequence;
        out.items.reserve(count);
        for (std::uint32_t i = 0; i < count; ++i) {
            const Object* item = object(depth + 1);
            if (!item)
                return false;
            out.items.push_back(item);
        }
        return true;
    }

    bool byte(std::uint8_t& out)
    {
        if (at_ == end_)
            return false;
        out = *at_++;
        return true;
    }
    bool u32(std::uint32_t& out)
    {
        if (end_ - at_ < 4)
            return false;
        out = static_cast<std::uint32_t>(at_[0]) | static_cast<std::uint32_t>(at_[1]) << 8 |
              static_cast<std::uint32_t>(at_[2]) << 16 | static_cast<std::uint32_t>(at_[3]) << 24;
        at_ += 4;
        return true;
    }
    bool skip(std::size_t size)
    {
        if (static_cast<std::size_t>(end_ - at_) < size)
            return false;
        at_ += size;
        return true;
    }
    bool short_skip()
    {
        std::uint8_t size = 0;
        return byte(size) && skip(size);
    }
    bool take(std::size_t size, std::string& out)
    {
        if (static_cast<std::size_t>(end_ - at_) < size)
            return false;
        out.assign(reinterpret_cast<const char*>(at_), size);
        at_ += size;
        return true;
    }

    const std::uint8_t* at_;
    const std::uint8_t* end_;
    CodeLayout layout_;
    std::deque<Object> objects_;   // stable addresses for references
    std::vector<const Object*> refs_;
};

const Object* item(const Object* sequence, std::size_t index)
{
    if (!sequence || sequence->kind != Object::Kind::sequence || index >= sequence->items.size())
        return nullptr;
    return sequence->items[index];
}

// The imports `code` runs as it runs, then those of the class bodies it defines. `searched`: a malformed file's
// references can make a code object its own constant.
void search(const Object& code, std::set<const Object*>& searched, std::vector<PythonImport>& out)
{
    // A reference can also name a code object still being read: its fields are missing.
    if (code.flags & co_newlocals || !code.bytecode || !code.consts || !code.names ||
        code.bytecode->kind != Object::Kind::text || !searched.insert(&code).second)
        return;
    const std::string& bytes = code.bytecode->text;
    // The two instructions before this one: `import` compiles to LOAD_CONST level, LOAD_CONST fromlist,
    // IMPORT_NAME name.
    struct Instruction {
        std::uint8_t op = cache_entry;
        std::uint32_t arg = 0;
    } before_last, last;
    std::uint32_t extended = 0;
    for (std::size_t at = 0; at + 1 < bytes.size(); at += 2) {
        auto op = static_cast<std::uint8_t>(bytes[at]);
        std::uint32_t arg = extended << 8 | static_cast<std::uint8_t>(bytes[at + 1]);
        if (op == extended_arg) {
            extended = arg;
            continue;
        }
        extended = 0;
        if (op == cache_entry)
            continue;
        if (op == import_name) {
            const Object* name = item(code.names, arg);
            if (name && name->kind == Object::Kind::text) {
                PythonImport found{name->text, 0, {}};
                const Object* level = before_last.op == load_const ? item(code.consts, before_last.arg) : nullptr;
                const Object* fromlist = last.op == load_const ? item(code.consts, last.arg) : nullptr;
                if (level && level->kind == Object::Kind::integer)
                    found.level = static_cast<int>(std::clamp<std::int64_t>(level->integer, 0, 1000));
                if (fromlist && fromlist->kind == Object::Kind::sequence)
                    for (const Object* entry : fromlist->items)
                        if (entry->kind == Object::Kind::text)
                            found.fromlist.push_back(entry->text);
                if (std::find(out.begin(), out.end(), found) == out.end())
                    out.push_back(std::move(found));
            }
        }
        before_last = last;
        last = {op, arg};
    }
    if (code.consts->kind == Object::Kind::sequence)
        for (const Object* constant : code.consts->items)
            if (constant->kind == Object::Kind::code)
                search(*constant, searched, out);
}

} // namespace

std::optional<std::vector<PythonImport>> read_python_imports(const std::string& pyc_file)
{
    auto data = read_file(pyc_file, max_pyc_bytes, "compiled module");   // the root's copy: any error, no answer
    if (!data || data->size() < header_bytes || (*data)[2] != '\r' || (*data)[3] != '\n')
        return std::nullopt;
    auto magic = static_cast<std::uint16_t>(static_cast<std::uint8_t>((*data)[0]) |
                                            static_cast<std::uint8_t>((*data)[1]) << 8);
    auto layout = layout_of(magic);
    if (!layout)
        return std::nullopt;
    Unmarshal reader(*data, header_bytes, *layout);
    const Object* module = reader.object();
    if (!module || module->kind != Object::Kind::code)
        return std::nullopt;
    std::vector<PythonImport> imports;
    std::set<const Object*> searched;
    search(*module, searched, imports);
    return imports;
}

} // namespace canopy::stage
