"""NVIDIA_REQUIRE_*: what driver a CUDA image says it needs, decided as NVIDIA decides it.

Which variables (nvidia-container-toolkit's image reading): every `NVIDIA_REQUIRE_*` of the
container's environment but `NVIDIA_REQUIRE_JETPACK*`, and for a legacy image (CUDA_VERSION,
no NVIDIA_REQUIRE_CUDA) `cuda>=MAJOR.MINOR`; none when NVIDIA_DISABLE_REQUIRE is true (Go's
strconv.ParseBool spellings). Every one must hold.

How one is evaluated (libnvidia-container's `nvidia-container-cli --require`, src/cli/dsl.c
and configure.c, the check NVIDIA's hook runs on datacenter hosts):

- space-separated terms are ORed, evaluated in order until one holds; a term's
  comma-separated constraints are ANDed, evaluated in order until one fails; empty ones are
  skipped. A constraint evaluation never reaches (after a failed one in its term, or in a
  term after one that held) is never read.
- a constraint is PROPERTY OP VALUE: PROPERTY cuda, driver, arch or brand (any case), OP
  exactly one of = != < <= > >=, VALUE not empty. cuda, driver and arch are versions: dot
  separated decimal numbers compared number by number (535.104.05 is 535.104.5, 12.2 is
  12.2.0); brand is compared without case, by = and != only. Anything else reached is an
  invalid expression: one line, the container refused.
- a host fact that cannot be told satisfies every constraint on it: the driver or CUDA
  version when unknown, a GPU's brand and compute capability (arch) when no GPU is selected
  or NVML cannot tell.
- with GPUs selected every requirement must hold for each (its brand and arch; a MIG
  device's are its GPU's); with none, once, brand and arch unknown.

The host's CUDA version is the driver's (NVIDIA's table, plan/cuda.py, else NVML's answer),
never the image's compat libraries': an image's requirement lists the driver branches its
compat package serves itself (`brand=tesla,driver>=535,driver<536`). Brand and arch are
asked of NVML (`Host.gpu_facts`, in the sandboxed child of discover/nvml.py) only when
evaluation reaches a brand or arch constraint. The environment is read for this check only.
"""

from __future__ import annotations

from ocihook.errors import OcihookError
from ocihook.structs import Struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MAX_REQUIREMENT = 4096  # characters of one NVIDIA_REQUIRE_* value
MAX_REQUIREMENTS = 32  # NVIDIA_REQUIRE_* variables
MAX_COMPONENTS = 8  # numbers in one version
MAX_DIGITS = 19  # digits in one of its numbers (libnvidia-container: a uintmax_t)
PROPERTIES = ("cuda", "driver", "arch", "brand")
VERSIONS = ("cuda", "driver", "arch")
OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
_OPERATOR_CHARS = "<>=!"
_TRUE = ("1", "t", "T", "TRUE", "true", "True")  # Go's strconv.ParseBool
DISABLE = "NVIDIA_DISABLE_REQUIRE"
PREFIX = "NVIDIA_REQUIRE_"
IGNORED_PREFIX = "NVIDIA_REQUIRE_JETPACK"
UINT32_MAX = (1 << 32) - 1


class Gpu(Struct):
    """A selected GPU, as the check names it: `label` for messages ("GPU 0"), `minor` (the
    N of /dev/nvidiaN) by which NVML's facts are looked up."""

    __slots__ = ("label", "minor")
    label: str
    minor: int | None


class Host(Struct):
    """The host facts a requirement is evaluated against: the driver version, its CUDA
    version (None: unknown), the selected GPUs, and `gpu_facts`, called at most once and
    only when evaluation reaches a brand or arch constraint: minor -> (brand, arch), plus
    NVML's CUDA version (for a driver the table does not know); None for what it cannot
    tell. `brand` (the config's cuda.brand) stands for every GPU's brand when set."""

    __slots__ = ("driver", "cuda", "gpus", "gpu_facts", "brand", "asked")
    _defaults = {"gpu_facts": None, "brand": None, "asked": None}
    driver: str | None
    cuda: str | None
    gpus: list[Gpu]
    gpu_facts: Callable[[], tuple[dict, str | None]] | None
    brand: str | None
    asked: tuple[dict, str | None] | None  # gpu_facts' answer, once asked

    def facts(self) -> tuple[dict, str | None]:
        """gpu_facts' answer, asked once ({} and None without it)."""
        if self.asked is None:
            self.asked = self.gpu_facts() if self.gpu_facts else ({}, None)
        return self.asked


class Failure(Struct):
    """Why a requirement does not hold: the variable, the expression, the GPU it was
    evaluated for (None: no GPU selected), the constraint that failed in its first term,
    how many terms it has, and the facts it was evaluated against."""

    __slots__ = ("name", "expression", "gpu", "failed", "terms", "facts")
    name: str
    expression: str
    gpu: Gpu | None
    failed: str
    terms: int
    facts: dict


def requirements(env: dict[str, str]) -> list[tuple[str, str]]:
    """(variable, expression) of each requirement in the container's environment, by
    name; none with NVIDIA_DISABLE_REQUIRE true. Bounded: OcihookError past the limits."""
    if env.get(DISABLE, "") in _TRUE:
        return []
    found = sorted(
        (name, value)
        for name, value in env.items()
        if name.startswith(PREFIX) and not name.startswith(IGNORED_PREFIX)
    )
    legacy = env.get("CUDA_VERSION", "")
    if legacy and not env.get("NVIDIA_REQUIRE_CUDA"):
        version = legacy_version(legacy)
        if version is None:
            raise OcihookError(
                f"CUDA_VERSION {legacy!r:.40}: not a version (MAJOR[.MINOR[.PATCH]])"
            )
        found.append(("CUDA_VERSION", f"cuda>={version}"))
    if len(found) > MAX_REQUIREMENTS:
        raise OcihookError(f"more than {MAX_REQUIREMENTS} NVIDIA_REQUIRE_* variables")
    for name, value in found:
        if len(value) > MAX_REQUIREMENT:
            raise OcihookError(f"{name}: longer than {MAX_REQUIREMENT} characters")
    return found


def legacy_version(text: str) -> str | None:
    """MAJOR.MINOR of a legacy image's CUDA_VERSION, read as the toolkit reads it (a semantic
    version, `v` allowed, one to three numbers, a -prerelease and +build suffix; major and
    minor 32-bit); None when it is none."""
    body = text[1:] if text.startswith("v") else text
    cut = min((i for i in (body.find("-"), body.find("+")) if i >= 0), default=len(body))
    core, suffix = body[:cut], body[cut:]
    if suffix and not _semver_suffix(suffix):
        return None
    parts = core.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    numbers = [int(p) for p in parts] + [0]
    if numbers[0] > UINT32_MAX or numbers[1] > UINT32_MAX:
        return None
    return f"{numbers[0]}.{numbers[1]}"


def _semver_suffix(text: str) -> bool:
    """-PRERELEASE and/or +BUILD: dot-separated identifiers of letters, digits and '-'."""
    pre, plus, build = text.partition("+")
    parts = []
    if pre:
        if not pre.startswith("-"):
            return False
        parts.append(pre[1:])
    if plus:
        parts.append(build)
    for part in parts:
        for ident in part.split("."):
            if not ident or not all(c.isascii() and (c.isalnum() or c == "-") for c in ident):
                return False
    return True


def version_numbers(text: str) -> tuple[int, ...] | None:
    """The numbers of a version as libnvidia-container reads one (digits and dots only,
    starting with a digit; runs of dots separate), bounded; None when it is none."""
    if not text or not text[0].isdigit() or len(text) > 64:
        return None
    if any(c not in "0123456789." for c in text):
        return None
    numbers = [p for p in text.split(".") if p]
    if len(numbers) > MAX_COMPONENTS or any(len(p) > MAX_DIGITS for p in numbers):
        return None
    return tuple(int(p) for p in numbers)


def _compare(left: tuple[int, ...], operator: str, right: tuple[int, ...]) -> bool:
    width = max(len(left), len(right))
    a, b = left + (0,) * (width - len(left)), right + (0,) * (width - len(right))
    return {
        "=": a == b,
        "!=": a != b,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[operator]


def parse_constraint(constraint: str, where: str) -> tuple[str, str, str]:
    """(property, operator, value) of one constraint; OcihookError (one line) when it is
    no constraint of NVIDIA's grammar."""
    start = min((i for i in map(constraint.find, _OPERATOR_CHARS) if i >= 0), default=-1)
    shown = f"{constraint[:60]!r}"
    if start < 0:
        raise OcihookError(f"{where}: {shown}: no operator (one of {' '.join(OPERATORS)})")
    if start == 0:
        raise OcihookError(f"{where}: {shown}: no property before the operator")
    end = start
    while end < len(constraint) and constraint[end] in _OPERATOR_CHARS:
        end += 1
    name, operator, value = constraint[:start].lower(), constraint[start:end], constraint[end:]
    if operator not in OPERATORS:
        raise OcihookError(f"{where}: {shown}: {operator!r} is no operator")
    if not value:
        raise OcihookError(f"{where}: {shown}: no value after the operator")
    if name not in PROPERTIES:
        raise OcihookError(
            f"{where}: {shown}: unknown property {constraint[:start][:30]!r} "
            f"(NVIDIA's are {', '.join(PROPERTIES)})"
        )
    if name in VERSIONS and version_numbers(value) is None:
        raise OcihookError(f"{where}: {shown}: {value[:30]!r} is no version")
    if name == "brand" and operator not in ("=", "!="):
        raise OcihookError(f"{where}: {shown}: a brand is compared by = and != only")
    return name, operator, value


def _holds(constraint: str, fact: Callable[[str], str | None], where: str) -> bool:
    name, operator, value = parse_constraint(constraint, where)
    have = fact(name)
    if have is None:
        return True  # a fact that cannot be told satisfies it, as in NVIDIA's check
    if name == "brand":
        return (have.lower() == value.lower()) is (operator == "=")
    numbers = version_numbers(have)
    if numbers is None:
        return True  # a host version of another form: as unknown
    return _compare(numbers, operator, version_numbers(value))  # type: ignore[arg-type]


def evaluate(expression: str, fact: Callable[[str], str | None], where: str) -> str | None:
    """None when the requirement holds; else the constraint that failed in its first term
    (libnvidia-container's order: see the module's docstring)."""
    holds = True
    first_failed = None
    for term in expression.split(" "):
        if not term:
            continue
        whole = True
        for constraint in term.split(","):
            if not constraint:
                continue
            holds = _holds(constraint, fact, where)
            if not holds:
                first_failed = first_failed or constraint
                whole = False
                break
        if whole:
            break
    return None if holds else (first_failed or expression.strip()[:60])


def _facts_for(host: Host, gpu: Gpu | None) -> Callable[[str], str | None]:
    """The fact lookup for one evaluation (NVML asked on the first brand or arch read)."""
    seen: dict = {}

    def fact(name: str) -> str | None:
        if name == "driver":
            value = host.driver
        elif name == "cuda":
            value = host.cuda if host.cuda is not None else host.facts()[1]
        elif gpu is None or gpu.minor is None:
            value = None
        elif name == "brand" and host.brand:
            value = host.brand
        else:
            brand, arch = host.facts()[0].get(gpu.minor, (None, None))
            value = brand if name == "brand" else arch
        seen[name] = value
        return value

    fact.seen = seen  # type: ignore[attr-defined]
    return fact


def unmet(found: list[tuple[str, str]], host: Host) -> Failure | None:
    """The first requirement that does not hold on the host (for each selected GPU, or once
    without one), or None; OcihookError for an invalid expression evaluation reaches."""
    for gpu in host.gpus or [None]:
        for name, expression in found:
            fact = _facts_for(host, gpu)
            failed = evaluate(expression, fact, name)
            if failed is not None:
                terms = len([t for t in expression.split(" ") if t])
                seen = {"driver": host.driver, **fact.seen}
                if "cuda" not in seen and host.cuda is not None:
                    seen["cuda"] = host.cuda
                return Failure(name, expression, gpu, failed, terms, seen)
    return None


def _newer_driver(found: list[tuple[str, str]], host: Host) -> tuple[str, str] | None:
    """(driver, its CUDA) of the oldest driver of NVIDIA's table newer than the host's with
    which every requirement would hold (same GPUs); None when none would."""
    from ocihook.plan.cuda import CUDA_BY_DRIVER, parse_version

    current = parse_version(host.driver or "")
    for minimum, cuda in reversed(CUDA_BY_DRIVER):
        if current is not None and minimum + (0,) * (3 - len(minimum)) <= current:
            continue
        driver = ".".join(f"{n:02d}" if i else str(n) for i, n in enumerate(minimum))
        candidate = host.replace(driver=driver, cuda=cuda)
        try:
            if unmet(found, candidate) is None:
                return driver, cuda
        except OcihookError:
            continue  # evaluation reached a term it cannot read
    return None


def selected_gpus(plan) -> list[Gpu]:
    """The GPUs a plan selected (its device_list: whole GPUs by their node number, a MIG
    device by its GPU's node), each once, as the check names them."""
    minors = {node.path: node.minor for node in plan.devices}
    gpus: dict = {}
    for device in plan.device_list:
        number = getattr(device, "number", None)
        if number is None and device.nodes:  # a MIG device: its GPU's node comes first
            number = minors.get(device.nodes[0])
        label = f"GPU {device.index}" if device.index is not None else device.nodes[0]
        gpus.setdefault(number, Gpu(label, number))
    return list(gpus.values())


def check(found: list[tuple[str, str]], host: Host) -> None:
    """Refuse (OcihookError, one line) a container whose requirements (`requirements`'
    list) the host does not meet: the variable, the constraint of its first term that
    failed, the facts it was evaluated against, and a driver update only where one would
    help."""
    if not found:
        return
    failure = unmet(found, host)
    if failure is None:
        return
    raise OcihookError(message(failure, _newer_driver(found, host)))


def message(failure: Failure, newer: tuple[str, str] | None) -> str:
    """The refusal's one line."""
    facts = failure.facts
    shown = f"driver {facts['driver'] or 'unknown'}"
    if "cuda" in facts:
        shown += f", CUDA {facts['cuda'] or 'unknown'}"
    if failure.gpu is not None and ("brand" in facts or "arch" in facts):
        gpu = [f"{k} {facts[k] or 'unknown'}" for k in ("brand", "arch") if k in facts]
        shown += f"; {failure.gpu.label}: {', '.join(gpu)}"
    others = failure.terms - 1
    rest = f" (or one of its {others} other terms)" if others > 1 else ""
    rest = " (or its other term)" if others == 1 else rest
    if newer is not None:
        advice = (
            f"a driver {newer[0]} or newer (CUDA {newer[1]}) meets it: update the driver, use "
            f"an image of an older CUDA, or set {DISABLE}=true"
        )
    else:
        advice = f"no newer driver meets it: use another image or GPU, or set {DISABLE}=true"
    return (
        f"{failure.name}: the image requires {failure.failed}{rest}, not met on this host "
        f"({shown}): {advice}"
    )
