"""The install checks, judged by what each install line does on the platform's image (default: Kaggle's).

- `unpinned-install`: a package the image ships, installed without one version where it surely moves: upgraded,
  replaced (a range that leaves the image's version out), torch's stack named without one version beside what
  makes pip resolve torch again (PyTorch's index, xformers, vllm, unsloth: they require one torch), or a range after
  an install that moved it (the same package moved, or uv's eager `--upgrade`). A name left open beside other
  packages moves only if one of them requires another version, which the image's list cannot tell: no finding.
  torch's CUDA stack is to be dropped from the line; anything else pinned to the image's version (shown), or to
  the version tested when that cannot be it. uv's `--upgrade` is eager: every package under what it installs moves.
- `stale-import`: a package an earlier cell imported, changed by a later install (the kernel keeps the old module).
- `import-before-install`: heavy imports above an install that can replace them or a library they load; conditional
  (`Problem.happens_if`) on that install bringing another version, which only its requirements tell.
- `hidden-install-output`: `%%capture` above installs that run.
A line in a branch that cannot run on the platform is no finding; one under a condition this lint cannot decide is
reported with the condition (`Problem.condition`); one in a branch decided to run says why it runs there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement

from nbutils.harness.install_lines import InstallCommand, Package
from nbutils.harness.platforms import Platform, admits, module_of
from nbutils.harness.problems import Problem
from nbutils.runtime.packages import is_torch_stack

# Imported before the install cell, these keep their old build loaded when the install moves them or a
# library under them (pandas loads pyarrow): Kaggle's template cell `import numpy as np; import pandas as pd`.
HEAVY_MODULES = ("numpy", "pandas", "pyarrow", "scipy", "sklearn", "matplotlib", "torch", "transformers", "tokenizers",
                 "huggingface_hub", "datasets", "accelerate")
QUOTE = 110  # characters of a source line quoted in a message
TORCH_INDEX = "download.pytorch.org"  # an install from PyTorch's own index is a torch reinstall
# Their wheels require one torch release (xformers, vllm, flash-attn) or they bring torch's stack with their own
# requirements (unsloth, unsloth_zoo): beside them pip resolves torch again.
TORCH_BOUND = frozenset({"xformers", "vllm", "flash-attn", "unsloth", "unsloth-zoo"})
EAGER = re.compile(r"--upgrade-strategy[= ]eager")


@dataclass
class Moved:
    """A preinstalled package an install can move, and how."""

    pkg: Package
    image: str  # the image's version ('' when known by name only)
    how: str  # excluded | upgrade | open (torch's stack resolved again) | drift (after an install that moved it)
    drift: str = ""  # the earlier install that moved it (how == drift)
    earlier: bool = False  # an earlier install names it: the image's version is not what this line finds


def specifier(pkg: Package) -> str:
    """The version specifier of a requirement ('' for a bare name, a URL or a wheel)."""
    try:
        return str(Requirement(pkg.spec).specifier)
    except InvalidRequirement:
        return ""


def written_name(pkg: Package) -> str:
    """The distribution name as the source spells it (huggingface_hub, not huggingface-hub)."""
    m = re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*", pkg.spec)
    return m.group(0) if m else pkg.spec


def changes(pkg: Package, cmd: InstallCommand, plat: Platform) -> bool:
    """Does installing this package change the image (a new package, another version, an upgrade)?"""
    image = plat.version(pkg.name) if pkg.name else None
    if image is None or cmd.upgrade:
        return True
    if pkg.pinned:
        return specifier(pkg) == "" or not admits(specifier(pkg), image or "0")
    return specifier(pkg) != "" and admits(specifier(pkg), image) is False if image else False


def narrower(before: str, spec: str) -> bool:
    """Does every version `before` allows also fit `spec`? (Checked at the versions the two name and next to them.)"""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if not before:
        return False
    points = set()
    for sp in (*SpecifierSet(before), *SpecifierSet(spec)):
        release = Version(sp.version.replace(".*", "")).release
        last = max((i for i, n in enumerate(release) if n), default=None)  # just below: 0.18.0 -> 0.17.999
        below = {(*release[:last], release[last] - 1, 999)} if last is not None else set()
        points |= {release, (*release[:-1], release[-1] + 1), *below}
    inside = [v for v in (Version(".".join(map(str, p))) for p in points) if v in SpecifierSet(before)]
    return bool(inside) and all(v in SpecifierSet(spec) for v in inside)


def eager(cmd: InstallCommand) -> bool:
    """Does this install upgrade everything under what it installs? uv's `--upgrade` does (pip's upgrades a
    dependency only when a requirement needs it), and pip's `--upgrade-strategy eager`."""
    uv = re.match(r"[!%]?\s*(\w+=\S+\s+)*uv\s+pip\b", cmd.text.strip()) is not None
    return cmd.upgrade and not cmd.no_deps and (uv or EAGER.search(cmd.text) is not None)


def resolves_torch(cmd: InstallCommand, plat: Platform, pkg: Package) -> bool:
    """Does pip resolve torch's stack again for this line (besides `pkg`): PyTorch's index, a package bound to one
    torch release, a torch-stack package it changes, or an argument that can be any of these (a variable)?"""
    if TORCH_INDEX in cmd.text or cmd.unknown:
        return True
    others = [p for p in cmd.packages if p is not pkg and p.name]
    return any(p.name in TORCH_BOUND or is_torch_stack(p.name) and changes(p, cmd, plat) for p in others)


def moved(cmd: InstallCommand, plat: Platform, drift: str = "",
          named: dict[str, tuple[str, str]] | None = None) -> list[Moved]:
    """The preinstalled packages this install surely moves, unpinned, and how. `drift`: an earlier eager upgrade
    (a range the image's version fits can then have moved; a bare name keeps what is there); `named`: packages
    earlier installs moved, and where (the image's version is then not what the line finds)."""
    out = []
    for pkg in cmd.packages:
        image = plat.version(pkg.name) if pkg.name else None
        if image is None or pkg.pinned:
            continue
        earlier, before = (named or {}).get(pkg.name or "", ("", ""))
        if earlier and not cmd.upgrade and specifier(pkg) and narrower(before, specifier(pkg)):
            continue  # what the earlier install left fits this range: pip keeps it
        inside = admits(specifier(pkg), image) if specifier(pkg) and image else True
        resolved = not cmd.no_deps and is_torch_stack(pkg.name or "") and resolves_torch(cmd, plat, pkg)
        how = "excluded" if inside is False else "upgrade" if cmd.upgrade else "open" if resolved else \
            "drift" if (earlier or drift) and specifier(pkg) else ""
        if how:
            out.append(Moved(pkg, image, how, earlier or (drift if how == "drift" else ""), bool(earlier)))
    return out


def unchanged(pkg: Package, cmd: InstallCommand, plat: Platform) -> bool:
    """Installing it changes nothing: on the image, named bare (any version fits, whatever an earlier install left)
    or pinned to the image's version, without an upgrade."""
    image = plat.version(pkg.name) if pkg.name else None
    return bool(image) and not cmd.upgrade and (not specifier(pkg) or pkg.pinned and bool(admits(specifier(pkg), image)))


def noop(cmd: InstallCommand, plat: Platform) -> bool:
    """An install that changes nothing (every package it names unchanged, nothing unknown)."""
    return not (cmd.unknown or cmd.requirement_files) and all(unchanged(p, cmd, plat) for p in cmd.packages)


def drifts(cmd: InstallCommand, plat: Platform) -> bool:
    """Can this install move packages it does not name (it resolves dependencies of something it changes)?"""
    return not cmd.no_deps and (cmd.unknown or any(changes(p, cmd, plat) for p in cmd.packages))


def quote(lines: list[str], line: int) -> str:
    """A source line as written, in backticks (cut after QUOTE characters)."""
    text = lines[line].strip() if line < len(lines) else ""
    return f"`{text[:QUOTE]}{'…' if len(text) > QUOTE else ''}`"


def line_of(cmd: InstallCommand, lines: list[str], specs: list[str]) -> int:
    """The physical line of the first spec named (a continued command spans several)."""
    for n in cmd.lines or [cmd.line]:
        if n < len(lines) and any(s in lines[n] for s in specs):
            return n
    return cmd.line


def range_written(pkg: Package) -> str:
    """The version range as the source writes it (`>=3.4.1,<4.0.0`, not packaging's sorted form)."""
    return pkg.spec[len(written_name(pkg)):].split(";")[0].strip() or specifier(pkg)


def _describe(m: Moved, label: str) -> str:
    spec = m.pkg.spec
    has = f"what {m.drift} left" if m.earlier else f"{label}'s {m.image}" if m.image else f"{label}'s own"
    if m.how == "excluded":
        return f"{spec} ({label}'s {m.image} is outside it: the newest release that fits replaces it, the day of the run)"
    if m.how == "upgrade":
        return f"{spec} (upgraded past {has} to the newest release it allows, the day of the run)"
    if m.earlier:
        return f"{spec} (a range; {m.drift} installs it too, and this range can move what that left, the day of the run)"
    return f"{spec} (a range; {has} fits it, but {m.drift} upgraded everything under it, so this line finds the " \
           "newest release that fits, the day of the run)"


EAGER_WHAT = ("upgrades every package under what it installs, the image's included (transformers, accelerate, numpy "
              "where they are dependencies), to the newest release that fits, the day of the run: {how}")


def eager_text(cmd: InstallCommand) -> tuple[str, str]:
    """What an eager upgrade does, and the fix."""
    how = "uv's `--upgrade` is eager" if EAGER.search(cmd.text) is None else "`--upgrade-strategy eager`"
    return EAGER_WHAT.format(how=how), "drop --upgrade (installed versions that fit then stay), and pin what must move"


def unpinned_text(cmd: InstallCommand, found: list[Moved], plat: Platform) -> tuple[str, str]:
    """What the line does on a background run, and the fix for this line."""
    torch = [m for m in found if is_torch_stack(m.pkg.name or "")]
    rest = [m for m in found if m not in torch]
    what, fixes, label = [], [], plat.label
    if torch:
        names = ", ".join(written_name(m.pkg) for m in torch)
        version = plat.version("torch")
        them = "them" if len(torch) > 1 else "it"
        built = f"{label}'s image ships {them} built for its CUDA driver{f', torch {version}' if version else ''}"
        if all(m.how == "open" for m in torch):
            what.append(f"leaves {names} unpinned beside what makes pip resolve torch again ({built}): pip may "
                        f"replace {them}")
        else:
            what.append(f"replaces {names} ({built})")
        what[-1] += ", and a background run then downloads torch again and can end with one the image's other " \
                    "packages were not built for"
        alone = all(is_torch_stack(p.name or "") for p in cmd.packages) and not cmd.unknown
        others = [written_name(p) for p in cmd.packages if not is_torch_stack(p.name or "")]
        torch_at = f"the image's torch{f' {version}' if version else ''}"
        if alone:
            fixes.append("drop this line")
        elif TORCH_INDEX in cmd.text:  # a reinstall of torch from PyTorch's index, with what is built against it
            fixes.append(f"drop this line; install {', '.join(others)} on its own, pinned to the build for {torch_at}")
        else:
            fixes.append(f"drop {names} from this line (what else it installs must fit {torch_at})")
    if rest:
        what.append(f"installs {', '.join(_describe(m, label) for m in rest)}: on a background run the version "
                    "depends on the day, and a module imported before this line keeps its old version")
        pins = [f"{written_name(m.pkg)}=={m.image}" for m in rest if m.image and m.how != "excluded" and not m.earlier]
        if pins:
            fixes.append(f"pin {' '.join(pins)} ({label}'s version{'s' if len(pins) > 1 else ''}, or the one"
                         f"{'s' if len(pins) > 1 else ''} you tested)")
        fixes += [f"pin {written_name(m.pkg)} to the one version you tested: {label}'s {m.image} is outside "
                  f"{range_written(m.pkg)}" for m in rest if m.how == "excluded"]
        fixes += [f"pin {written_name(m.pkg)} to the version you tested ({m.drift} installs it too)"
                  for m in rest if m.earlier and m.how != "excluded"]
        fixes += [f"pin {written_name(m.pkg)} to the version you tested" for m in rest if not m.image]
    if eager(cmd):
        said, fix = eager_text(cmd)
        what, fixes = [*what, said], [*fixes, fix]
    return "; it also ".join(what), "; ".join(fixes)


def runs_because(cmd: InstallCommand, plat: Platform) -> str:
    """For a line in a branch decided to run: why it runs on the platform ('' otherwise)."""
    return f"; this line runs on {plat.label}: {cmd.reach.because[0]}" if cmd.reach.because else ""


@dataclass
class Installs:
    """What the cells above have done, as the run goes down the notebook."""

    imported_at: dict[str, tuple[int, int, str]]  # module -> (cell, 1-based line, condition or '') of its first import
    reported: set[int]  # import cells already reported
    drift: str = ""  # the first eager upgrade: it moved packages it does not name ('' before it)
    named: dict[str, tuple[str, str]] = field(default_factory=dict)  # package -> (the last install that moved it
    # before, its specifier there)


def condition(cmd: InstallCommand) -> str | None:
    """The conditions not decided that the install runs under, joined ('' becomes None)."""
    return " and ".join(cmd.reach.unless) or None


def changeable_modules(commands: list[InstallCommand], calls_installer: bool) -> set[str] | None:
    """Import names an install cell can replace; None when it can replace anything (dependencies, unknowns)."""
    if calls_installer or any(not c.no_deps or c.unknown for c in commands):
        return None
    return {module_of(n) for c in commands for n in c.names}


def unpinned_problems(name: str, cell: int, lines: list[str], commands: list[InstallCommand],
                      plat: Platform, state: Installs) -> list[Problem]:
    """unpinned-install, one per install command that can move a preinstalled package."""
    out = []
    for cmd in sorted(commands, key=lambda c: c.line):
        found = moved(cmd, plat, state.drift, state.named)
        where = f"the install in cell {cell} line {cmd.line + 1}"
        if eager(cmd) and drifts(cmd, plat) and not state.drift:
            state.drift = where
        state.named.update({p.name: (where, specifier(p)) for p in cmd.packages if p.name and changes(p, cmd, plat)})
        if found or eager(cmd):
            line = line_of(cmd, lines, [m.pkg.spec for m in found])
            what, fix = unpinned_text(cmd, found, plat)
            out.append(Problem("unpinned-install", name, cell, f"{quote(lines, line)} {what}{runs_because(cmd, plat)}",
                               fix, line=line + 1, condition=condition(cmd)))
    return out


def stale_problems(name: str, cell: int, lines: list[str], commands: list[InstallCommand], plat: Platform,
                   state: Installs, here: dict[str, tuple[int, str]] | None = None) -> list[Problem]:
    """stale-import: this cell changes a package an earlier cell imported, or a line above it in this cell (`here`:
    this cell's imports, module -> (1-based line, condition))."""
    out = []
    for cmd in commands:
        for pkg in cmd.packages:
            module = module_of(pkg.name) if pkg.name else None
            above = (here or {}).get(module or "")
            if above is not None and above[0] - 1 >= cmd.line:
                above = None  # imported below the install: it loads the new version
            if (module in state.imported_at or above) and not unchanged(pkg, cmd, plat):
                at, at_line, _ = state.imported_at.get(module) or (cell, *above)
                where = f"cell {at}" if at != cell else "this cell"
                line = line_of(cmd, lines, [pkg.spec])
                out.append(Problem("stale-import", name, cell,
                                   f"{quote(lines, line)} installs {pkg.spec} after {where} imported {module} "
                                   f"(line {at_line}): the kernel keeps the module it loaded, so the run goes on "
                                   f"with the old {module}{runs_because(cmd, plat)}",
                                   "move this install into the first code cell, above every import",
                                   line=line + 1, condition=condition(cmd)))
    return out


def import_problems(name: str, cell: int, lines: list[str], commands: list[InstallCommand], installer: int | None,
                    plat: Platform, state: Installs, cells: list[str]) -> list[Problem]:
    """import-before-install: heavy imports in earlier cells that this cell's installs (or its call of the notebooks'
    install step, on line `installer`) can replace."""
    commands = [c for c in commands if not noop(c, plat)]
    calls_installer = installer is not None
    if not commands and not calls_installer:
        return []
    direct = {module_of(p.name) for c in commands for p in c.packages if p.name}
    can_change = changeable_modules(commands, calls_installer)
    by_cell: dict[int, list[tuple[int, str, str]]] = {}
    for module, (at, at_line, cond) in state.imported_at.items():
        if module in HEAVY_MODULES and module not in direct and (can_change is None or module in can_change):
            by_cell.setdefault(at, []).append((at_line, module, cond))
    at_line = installer if calls_installer else commands[0].line
    where = f"cell {cell} line {at_line + 1} ({quote(lines, at_line)})"
    out = []
    for at, found in sorted(by_cell.items()):
        if at in state.reported:
            continue
        state.reported.add(at)
        found.sort(key=lambda f: (bool(f[2]), f[0]))  # an import that always runs first: the line to quote
        first, _, cond = found[0]
        modules = ", ".join(f"{m} (line {n}{f', only if {c}' if c else ''})" for n, m, c in sorted(found))
        names = ", ".join(sorted({m for _, m, _ in found}))
        out.append(Problem("import-before-install", name, at,
                           f"{quote(cells[at].splitlines(), first - 1)} imports {modules} before the install in {where}, "
                           "which can replace them or a library they load (pandas loads pyarrow): the kernel keeps "
                           "the old builds", f"move this import below cell {cell}, or the installs into the first code cell",
                           line=first, condition=cond or None,
                           happens_if=f"what that install brings requires another {names} or a library under it "
                                      "than the image's (its log then says `Uninstalling`)"))
    return out


def hidden_output_problems(name: str, cell: int, lines: list[str], commands: list[InstallCommand]) -> list[Problem]:
    """hidden-install-output: `%%capture` over installs that run."""
    if not lines or not lines[0].strip().startswith("%%capture") or not commands:
        return []
    shown = ", ".join(str(n) for n in sorted({c.line + 1 for c in commands}))
    return [Problem("hidden-install-output", name, cell,
                    f"`%%capture` hides what the installs on line{'s' if ',' in shown else ''} {shown} print: on a "
                    "background run a failed install leaves nothing in the log, and the notebook stops later at an "
                    "import", "delete the `%%capture` line (pip's -q keeps the log short)", line=1)]
