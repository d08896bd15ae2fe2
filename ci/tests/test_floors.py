"""ci/floors.py over tiny trees built in tmp_path (a ground floor, a floor above it, a test helper
room) and over this repository, which must pass in well under the 2 s the check may take."""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CI = os.path.dirname(HERE)
REPO = os.path.dirname(CI)
FLOORS = os.path.join(CI, "floors.py")


def write(root, path, text):
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text)


def house(root):
    """ground <- upper, and helpers (test code) standing on upper."""
    write(root, "ground/CMakeLists.txt", "# The ground floor.\n# floors:\nadd_library(ground g.cc)\n")
    write(root, "ground/g.h", "#pragma once\n#include <string>\n")
    write(root, "ground/g.cc", '#include "ground/g.h"\n')
    write(root, "ground/inner/CMakeLists.txt", "# no floors line: part of ground\n")
    write(root, "ground/inner/i.h", '#pragma once\n#include "ground/g.h"\n')
    write(root, "upper/CMakeLists.txt", "# floors: ground\n# floors for tests: helpers\n")
    write(root, "upper/u.h", '#pragma once\n#include "ground/inner/i.h"\n#include "local.h"\n')
    write(root, "upper/local.h", "#pragma once\n")
    write(root, "upper/u_test.cc", '#include "upper/u.h"\n#include "helpers/h.h"\n')
    write(root, "helpers/CMakeLists.txt", "# floors: upper ground\n")
    write(root, "helpers/h.h", '#pragma once\n#include "upper/u.h"\n')
    write(root, "outside/tool.cc", '#include "upper/u.h"\n')  # in no room: not checked


def run(root):
    return subprocess.run([sys.executable, FLOORS, str(root)], capture_output=True, text=True, timeout=60)


def test_a_house_whose_floors_point_down_passes(tmp_path):
    house(tmp_path)
    r = run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""


def test_an_include_up_a_floor_fails_naming_file_line_and_include(tmp_path):
    house(tmp_path)
    write(tmp_path, "ground/inner/bad.cc", '#include "ground/g.h"\n\n#include "upper/u.h"\n')
    r = run(tmp_path)
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        'ground/inner/bad.cc:3: #include "upper/u.h": ground may not include upper '
        "(its floors, in ground/CMakeLists.txt: none)"
    ]


def test_only_tests_may_use_a_rooms_test_floors(tmp_path):
    house(tmp_path)
    write(tmp_path, "upper/u.cc", '#include "helpers/h.h"\n')
    write(tmp_path, "upper/testing/fixture.h", '#include "helpers/h.h"\n')
    r = run(tmp_path)
    assert r.returncode == 1
    assert [line.split(":")[0] for line in r.stdout.splitlines()] == ["upper/u.cc"]


def test_floors_lines_must_name_rooms_and_form_no_cycle(tmp_path):
    house(tmp_path)
    write(tmp_path, "ground/CMakeLists.txt", "# floors: upper cellar\n")
    r = run(tmp_path)
    assert r.returncode == 1
    assert "ground/CMakeLists.txt: floors name cellar, which is no room" in r.stdout
    assert "floors point up: ground -> upper -> ground" in r.stdout


def test_the_repository_keeps_its_floors_quickly():
    start = time.monotonic()
    r = run(REPO)
    took = time.monotonic() - start
    assert r.returncode == 0, r.stdout + r.stderr
    assert took < 2.0, f"ci/floors.py took {took:.2f} s"
