#!/usr/bin/env python3
"""Fails on an #include that points up a floor (issue 29: floors that only point down).

A room is a folder whose CMakeLists.txt has a floors line; the line names the rooms its files may
include, and a second, optional line the rooms its tests may include besides:

    # floors: harness/results harness/detail faults core
    # floors for tests: harness/tests

A file belongs to the room with the longest path that holds it (core/points/point.h is in
core/points, core/alloc/pool.cc in core); files in no room (ci/, cmake/) are not checked. A file is
a test when its name holds "_test." or "_test_" or it lies in a tests/, testing/ or testdata/ folder of its
room. An include names a project header when its first folder is a top folder of a room (or it
resolves beside the including file); it is allowed when the header is in the file's own room or a
room the file's floors name. The floors lines themselves must only point down: the rooms they
name exist, and no room reaches itself through them (tests' lines may point anywhere).

Usage: ci/floors.py [ROOT]   (ROOT: the repository, by default this script's parent's parent)
Exit status 0 when every include is allowed, 1 with one line per offending include otherwise.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

SOURCE_SUFFIXES = {".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".inc"}
TEST_FOLDERS = {"tests", "testing", "testdata"}
TEST_NAME = re.compile(r"_test[._]")  # region_test.cc, cli_e2e_test.cc, alloc_test_util.h
FLOORS_LINE = re.compile(r"^\s*#\s*floors:(.*)$")
TEST_FLOORS_LINE = re.compile(r"^\s*#\s*floors for tests:(.*)$")
INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


@dataclass
class Room:
    path: str  # relative to the root, "/"-separated
    floors: list[str] = field(default_factory=list)
    test_floors: list[str] = field(default_factory=list)
    lists_file: str = ""


def skipped_dir(root: Path, rel: str, name: str) -> bool:
    """Build trees, virtual environments and hidden folders hold no sources of the project."""
    if name.startswith(".") or name in {"node_modules", "__pycache__"}:
        return True
    return (root / rel / name / "CMakeCache.txt").exists()


def walk(root: Path) -> tuple[list[str], list[str]]:
    """The CMakeLists.txt files and the C and C++ sources under root, relative to it."""
    lists, sources = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel = "" if rel == "." else rel
        dirnames[:] = sorted(d for d in dirnames if not skipped_dir(root, rel, d))
        for name in filenames:
            path = f"{rel}/{name}" if rel else name
            if name == "CMakeLists.txt":
                lists.append(path)
            elif os.path.splitext(name)[1] in SOURCE_SUFFIXES:
                sources.append(path)
    return lists, sources


def read_rooms(root: Path, lists: list[str]) -> dict[str, Room]:
    rooms: dict[str, Room] = {}
    for lists_file in lists:
        room = None
        for line in (root / lists_file).read_text(errors="replace").splitlines():
            m = FLOORS_LINE.match(line) or TEST_FLOORS_LINE.match(line)
            if not m:
                continue
            if room is None:
                room = Room(path=os.path.dirname(lists_file), lists_file=lists_file)
            names = m.group(1).split()
            (room.floors if m.re is FLOORS_LINE else room.test_floors).extend(names)
        if room is not None and room.path:
            rooms[room.path] = room
    return rooms


def room_of(path: str, rooms: dict[str, Room]) -> str | None:
    """The room holding `path`: its longest room path."""
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        candidate = "/".join(parts[:n])
        if candidate in rooms:
            return candidate
    return None


def is_test(path: str, room: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    inner = path[len(room) + 1:].split("/")[:-1]
    return TEST_NAME.search(name) is not None or any(part in TEST_FOLDERS for part in inner)


def resolve(root: Path, source: str, target: str, top_folders: set[str]) -> str | None:
    """The include's path relative to the root when it names a project header, else None."""
    if target.split("/", 1)[0] in top_folders and "/" in target:
        return target
    beside = os.path.normpath(os.path.join(os.path.dirname(source), target)).replace(os.sep, "/")
    if not beside.startswith("..") and (root / beside).is_file():
        return beside
    return None


def check_floor_lines(rooms: dict[str, Room]) -> list[str]:
    """Every room a floors line names exists, and the floors lines form no cycle."""
    errors = []
    for room in rooms.values():
        for name in room.floors + room.test_floors:
            if name not in rooms:
                errors.append(f"{room.lists_file}: floors name {name}, which is no room (no CMakeLists.txt with a floors line)")
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for below in rooms[name].floors:
            if below not in rooms or below == name:
                continue
            if state.get(below) == 1:
                cycle = trail[trail.index(below):] + [below] if below in trail else [name, below]
                errors.append(f"{rooms[name].lists_file}: floors point up: {' -> '.join(cycle)}")
            elif below not in state:
                visit(below, trail + [below])
        state[name] = 2

    for name in sorted(rooms):
        if name not in state:
            visit(name, [name])
    return errors


def check(root: Path) -> list[str]:
    lists, sources = walk(root)
    rooms = read_rooms(root, lists)
    errors = check_floor_lines(rooms)
    top_folders = {name.split("/", 1)[0] for name in rooms}
    for source in sources:
        room = room_of(source, rooms)
        if room is None:
            continue
        allowed = {room, *rooms[room].floors}
        if is_test(source, room):
            allowed.update(rooms[room].test_floors)
        lines = (root / source).read_text(errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            if "include" not in line:
                continue
            m = INCLUDE_LINE.match(line)
            if not m:
                continue
            target = resolve(root, source, m.group(1), top_folders)
            target_room = room_of(target, rooms) if target else None
            if target_room is None or target_room in allowed:
                continue
            floors = " ".join(rooms[room].floors) or "none"
            errors.append(f"{source}:{number}: {line.strip()}: {room} may not include {target_room} "
                          f"(its floors, in {rooms[room].lists_file}: {floors})")
    return errors


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    errors = check(root)
    for error in errors:
        print(error)
    if errors:
        print(f"ci/floors.py: {len(errors)} include(s) against the floors", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
