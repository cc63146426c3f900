// What a compiled module imports as it runs, read from .pyc files this machine's Python compiled; and what a
// Python command line imports first.
#include "stage_tree/python_command.hpp"
#include "stage_tree/python_imports.hpp"

#include "stage_fetch_helpers.hpp"

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace canopy::stage {

// Printed as the statement it stands for, when a comparison fails.
void PrintTo(const PythonImport& import, std::ostream* out)
{
    *out << "level " << import.level << " '" << import.module << "'";
    for (const auto& name : import.fromlist)
        *out << " " << name;
}

namespace {

namespace fs = std::filesystem;
using namespace testing;

class PythonImports : public ::testing::Test {
protected:
    // `source` as pkg/mod.py, compiled; the path of its bytecode.
    std::string compile(const std::string& source)
    {
        fs::create_directories(dir_ + "/pkg");
        write(dir_ + "/pkg/mod.py", source);
        std::string failed = compile_python(dir_);
        EXPECT_EQ(failed, "");
        std::string pyc = compiled(dir_ + "/pkg", "mod");
        EXPECT_NE(pyc, "") << "no bytecode in " << dir_ << "/pkg/__pycache__";
        return pyc;
    }

    TempDir temp_{"canopy-test-pyc"};
    std::string dir_ = temp_.path();
};

TEST_F(PythonImports, AModulesBodyAndClassBodiesImportsAreReadInOrderNotItsFunctions)
{
    std::string pyc = compile("import os, sys as system\n"
                              "import json.decoder\n"
                              "from . import sibling\n"
                              "from .sub import thing as renamed\n"
                              "from ..up import other\n"
                              "from collections import OrderedDict, abc\n"
                              "try:\n"
                              "    import not_there\n"
                              "except ImportError:\n"
                              "    pass\n"
                              "import os\n"
                              "class Holder:\n"
                              "    import string\n"
                              "    class Inner:\n"
                              "        from math import pi\n"
                              "    def method(self):\n"
                              "        import email\n"
                              "def later():\n"
                              "    import never_at_import\n"
                              "    class InAFunction:\n"
                              "        import nor_this\n"
                              "later_too = lambda: __import__('nor_that')\n");
    auto imports = read_python_imports(pyc);
    ASSERT_TRUE(imports);
    EXPECT_EQ(*imports, (std::vector<PythonImport>{{"os", 0, {}},
                                                  {"sys", 0, {}},
                                                  {"json.decoder", 0, {}},
                                                  {"", 1, {"sibling"}},
                                                  {"sub", 1, {"thing"}},
                                                  {"up", 2, {"other"}},
                                                  {"collections", 0, {"OrderedDict", "abc"}},
                                                  {"not_there", 0, {}},
                                                  {"string", 0, {}},
                                                  {"math", 0, {"pi"}}}));
}

TEST_F(PythonImports, AModuleWithManyConstantsStillGivesEachImportsLevelAndNames)
{
    // Over 256 constants: the import's LOAD_CONSTs then take EXTENDED_ARG.
    std::string source;
    for (int i = 0; i < 300; ++i)
        source += "c" + std::to_string(i) + " = " + std::to_string(1000 + i) + "\n";
    source += "from .far import late\n";
    auto imports = read_python_imports(compile(source));
    ASSERT_TRUE(imports);
    EXPECT_EQ(*imports, (std::vector<PythonImport>{{"far", 1, {"late"}}}));
}

TEST_F(PythonImports, WhatIsNotBytecodeThisReadsGivesNoAnswer)
{
    std::string pyc = compile("import os\nfrom . import sibling\nclass C:\n    import string\n");
    std::string bytes = read(pyc);
    ASSERT_TRUE(read_python_imports(pyc));

    // Cut anywhere: no answer, and no crash.
    for (std::size_t size = 0; size < bytes.size(); ++size) {
        write(dir_ + "/cut.pyc", bytes.substr(0, size));
        EXPECT_FALSE(read_python_imports(dir_ + "/cut.pyc")) << "cut at " << size << " of " << bytes.size();
    }
    // Another Python's magic number, a source file, a missing file.
    std::string other = bytes;
    other[0] = static_cast<char>(other[0] + 1);
    write(dir_ + "/other.pyc", other);
    EXPECT_FALSE(read_python_imports(dir_ + "/other.pyc"));
    EXPECT_FALSE(read_python_imports(dir_ + "/pkg/mod.py"));
    EXPECT_FALSE(read_python_imports(dir_ + "/missing.pyc"));
}

TEST_F(PythonImports, ACodeObjectThatIsItsOwnConstantEndsTheSearch)
{
    // Crafted: a module's code object whose constants refer back to it (marshal's FLAG_REF and TYPE_REF). The
    // header takes the magic number of the Python that compiled the tests' modules.
    std::string header = read(compile("x = 1\n")).substr(0, 16);
    auto u32 = [](std::uint32_t v) {
        return std::string{static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
                           static_cast<char>(v >> 24)};
    };
    unsigned magic = static_cast<unsigned char>(header[0]) | static_cast<unsigned char>(header[1]) << 8;
    bool before_3_11 = magic < 3450;   // a code object's fields: one more count, one less object after the line
    std::string code = std::string(1, static_cast<char>('c' | 0x80));
    for (int i = 0; i < (before_3_11 ? 6 : 5); ++i)
        code += u32(0);                                  // counts and flags: a module's
    code += std::string("s") + u32(2) + std::string("\x6c\x00", 2);   // bytecode: IMPORT_NAME 0
    code += std::string(")\x01") + "r" + u32(0);         // consts: (itself,)
    code += std::string(")\x01") + "z\x04loop";          // names: ("loop",)
    for (int i = 0; i < 5; ++i)
        code += std::string(")\x00", 2);
    code += u32(1);
    for (int i = 0; i < (before_3_11 ? 1 : 2); ++i)
        code += std::string("s") + u32(0);
    write(dir_ + "/loop.pyc", header + code);
    auto imports = read_python_imports(dir_ + "/loop.pyc");
    ASSERT_TRUE(imports);
    EXPECT_EQ(*imports, (std::vector<PythonImport>{{"loop", 0, {}}}));
}

// The imports of `python ARGUMENTS`, as "module" or "module: name name".
std::vector<std::string> command(const std::vector<std::string>& arguments)
{
    std::vector<std::string> modules;
    for (const auto& import : python_command_imports(arguments)) {
        EXPECT_EQ(import.level, 0);
        std::string text = import.module;
        for (const auto& name : import.fromlist)
            text += (&name == &import.fromlist.front() ? ": " : " ") + name;
        modules.push_back(text);
    }
    return modules;
}

TEST(PythonCommand, TheStatementsThatStartALineOfCCodeAreItsImportsAbsoluteOnesInOrder)
{
    EXPECT_EQ(command({"-c", "import os, time\n"
                             "started = time.perf_counter(); import numpy as np, numpy.linalg  # the module\n"
                             "from torch.nn import (Module, Linear as L,)\n"
                             "from json import *\n"
                             "from . import sibling\n"
                             "def later():\n"
                             "    import never_run\n"
                             "if True:\n"
                             "\timport maybe\n"
                             "x = 'import not_a_statement'\n"
                             "import 3d, ok\n"
                             "from a.b import c.d\n"}),
              (std::vector<std::string>{"os", "time", "numpy", "numpy.linalg", "torch.nn: Module Linear",
                                        "json: *"}));
}

TEST(PythonCommand, OptionsBeforeTheCodeOrModuleAreSkippedAsPythonReadsThem)
{
    EXPECT_EQ(command({"-u", "-W", "ignore", "-X", "dev", "-Bc", "import numpy"}), std::vector<std::string>{"numpy"});
    EXPECT_EQ(command({"-cimport numpy"}), std::vector<std::string>{"numpy"});
    EXPECT_EQ(command({"-m", "torch.distributed.run", "--nproc-per-node", "4", "train.py"}),
              std::vector<std::string>{"torch.distributed.run"});
    EXPECT_EQ(command({"-Wignore", "-mpip"}), std::vector<std::string>{"pip"});
}

TEST(PythonCommand, AScriptStandardInputOrNoCodeImportsNothingHere)
{
    EXPECT_EQ(command({"train.py", "-c", "import numpy"}), std::vector<std::string>{});
    EXPECT_EQ(command({"-", "-c", "import numpy"}), std::vector<std::string>{});
    EXPECT_EQ(command({"-u", "--", "-c"}), std::vector<std::string>{});
    EXPECT_EQ(command({"-c"}), std::vector<std::string>{});
    EXPECT_EQ(command({"-m", "not a module"}), std::vector<std::string>{});
    // A long option's value reads as a script: nothing, rather than a guess.
    EXPECT_EQ(command({"--check-hash-based-pycs", "never", "-c", "import numpy"}), std::vector<std::string>{});
    EXPECT_EQ(command({}), std::vector<std::string>{});
}

} // namespace
} // namespace canopy::stage
