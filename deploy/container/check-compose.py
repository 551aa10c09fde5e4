#!/usr/bin/python3
"""Checks that hookline's container artefacts agree with each other and with the configuration.

    /usr/bin/python3 deploy/container/check-compose.py            the files: Containerfile, Containerfile.host,
                                                                   compose.yaml, hookline.toml
    /usr/bin/python3 deploy/container/check-compose.py --images DIR
        the built images: DIR/NAME.config.json (`podman image inspect --format '{{json .Config}}'`) and DIR/NAME/
        (the exported root filesystem) of hookline-edge, hookline-worker and hookline, against Containerfile

What must hold (each failure names the file and the field):
- Containerfile and Containerfile.host are the same from their "images" line on (one set of images, two ways of
  getting the binaries);
- each image runs as a non-root numeric user, has an exec-form ENTRYPOINT and HEALTHCHECK whose programs it
  COPYs, its HEALTHCHECK probes 127.0.0.1 on a port it EXPOSEs, and reads HOOKLINE_CONFIG;
- hookline.toml: every listener on 0.0.0.0 at a port its image EXPOSEs and, for the health listener, the one its
  HEALTHCHECK probes; the sandbox's edge_url and the providers' api_base name the compose services and ports;
  the providers are deploy/hookline.toml's (only api_base differs);
- compose.yaml: the seven services; each hookline service's image, build target, command (entrypoint + command
  as the image runs it), published ports (all of its listeners, on 127.0.0.1, EXPOSEd), health check (its own or
  the image's, on its health listener) and configuration mount; environment for every `env:NAME` of the
  configuration; DATABASE_URL / AMQP_URL naming the postgres and rabbitmq services with their users and
  passwords; migrations first (service_completed_successfully), the broker healthy before edge and worker.
Exits 1 with every problem found, 0 with a summary.
"""

import json
import os
import re
import shlex
import sys
import tomllib
from urllib.parse import urlsplit

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MARKER = "# ---- images: from here on identical in Containerfile and Containerfile.host ----"
PROBE = "/usr/local/bin/hookline-healthcheck"
# Image stage -> image name (compose `image:` ends with NAME:TAG; build.sh tags localhost/NAME:TAG).
STAGES = {"edge": "hookline-edge", "worker": "hookline-worker", "hookline": "hookline"}
HOOKLINE_SERVICES = {"migrate", "edge", "worker", "console", "sandbox"}

problems = []


def problem(where, message):
    problems.append(f"{where}: {message}")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------- Containerfiles


def instructions(text):
    """(keyword, argument text) per instruction: comments dropped, continuation lines joined."""
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        keyword, _, rest = current.partition(" ")
        out.append((keyword.upper(), rest.strip()))
        current = ""
    return out


def exec_form(where, text):
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        problem(where, f"not in exec form (a JSON list): {text}; the images have no shell")
        return []
    return value


def duration(text):
    m = re.fullmatch(r"(\d+)(ms|s|m)", text)
    if not m:
        return None
    return int(m.group(1)) * {"ms": 10**6, "s": 10**9, "m": 60 * 10**9}[m.group(2)]


def stages(path, text):
    """The image stages below MARKER: {stage: {user, entrypoint, cmd, expose, healthcheck, env, copies}}."""
    result, stage = {}, None
    for keyword, rest in instructions(text):
        where = f"{os.path.relpath(path, ROOT)} stage {stage}"
        if keyword == "FROM":
            m = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", rest, re.IGNORECASE)
            stage = m.group(2) if m else None
            if stage:
                result[stage] = {"from": m.group(1), "user": None, "entrypoint": None, "cmd": None,
                                 "expose": set(), "healthcheck": None, "env": {}, "copies": set()}
            continue
        if stage is None:
            continue
        s = result[stage]
        if keyword == "USER":
            s["user"] = rest
        elif keyword == "ENTRYPOINT":
            s["entrypoint"] = exec_form(where + " ENTRYPOINT", rest)
        elif keyword == "CMD":
            s["cmd"] = exec_form(where + " CMD", rest)
        elif keyword == "EXPOSE":
            s["expose"] |= {int(p.split("/")[0]) for p in rest.split()}
        elif keyword == "ENV":
            for item in shlex.split(rest):
                k, _, v = item.partition("=")
                s["env"][k] = v
        elif keyword == "COPY":
            parts = [p for p in rest.split() if not p.startswith("--")]
            dest = parts[-1]
            for src in parts[:-1]:
                s["copies"].add(dest + os.path.basename(src) if dest.endswith("/") else dest)
        elif keyword == "HEALTHCHECK":
            options, cmd = {}, rest
            while cmd.startswith("--"):
                opt, _, cmd = cmd.partition(" ")
                k, _, v = opt[2:].partition("=")
                options[k] = v
                cmd = cmd.strip()
            if not cmd.startswith("CMD "):
                problem(where, f"HEALTHCHECK without CMD: {rest}")
                continue
            s["healthcheck"] = {"test": ["CMD"] + exec_form(where + " HEALTHCHECK", cmd[4:].strip()),
                                "options": options}
    return result


def check_containerfiles():
    files = {name: read(os.path.join(HERE, name)) for name in ("Containerfile", "Containerfile.host")}
    parts = {}
    for name, text in files.items():
        if MARKER not in text:
            problem(name, f"the line '{MARKER}' is missing")
            return {}
        parts[name] = text[text.index(MARKER):]
    if parts["Containerfile"] != parts["Containerfile.host"]:
        a, b = parts["Containerfile"].splitlines(), parts["Containerfile.host"].splitlines()
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        problem("Containerfile.host", f"differs from Containerfile below the images line, first at its line "
                f"{first + 1} of that part: {b[first] if first < len(b) else '<end>'!r} vs "
                f"{a[first] if first < len(a) else '<end>'!r}")
    images = stages(os.path.join(HERE, "Containerfile"), parts["Containerfile"])
    for stage in STAGES:
        s = images.get(stage)
        where = f"Containerfile stage {stage}"
        if s is None:
            problem(where, "missing")
            continue
        user = (s["user"] or "").split(":")
        if not (user[0].isdigit() and int(user[0]) != 0 and all(u.isdigit() for u in user)):
            problem(where, f"USER must be a numeric non-root user (uid:gid), is {s['user']!r}")
        if not s["entrypoint"]:
            problem(where, "no ENTRYPOINT")
        elif s["entrypoint"][0] not in s["copies"]:
            problem(where, f"ENTRYPOINT {s['entrypoint'][0]} is not COPYed into the image")
        # The process each image runs by default: its HEALTHCHECK probes that one's listener (check_config).
        default = {"edge": (["/usr/local/bin/hookline-edge"], None),
                   "worker": (["/usr/local/bin/hookline-worker"], None),
                   "hookline": (["/usr/local/bin/hookline"], ["console", "serve"])}[stage]
        if (s["entrypoint"], s["cmd"]) != default:
            problem(where, f"runs {s['entrypoint']} {s['cmd'] or ''} by default, expected {default[0]} {default[1] or ''}")
        if s["env"].get("HOOKLINE_CONFIG") != "/etc/hookline/hookline.toml":
            problem(where, "ENV HOOKLINE_CONFIG=/etc/hookline/hookline.toml missing")
        hc = s["healthcheck"]
        if hc is None:
            problem(where, "no HEALTHCHECK")
            continue
        test = hc["test"]
        if len(test) != 3 or test[1] != PROBE:
            problem(where, f"HEALTHCHECK must be CMD [\"{PROBE}\", URL], is {test}")
            continue
        if PROBE not in s["copies"]:
            problem(where, f"HEALTHCHECK runs {PROBE}, which is not COPYed into the image")
        url = urlsplit(test[2])
        if url.hostname != "127.0.0.1" or url.port not in s["expose"]:
            problem(where, f"HEALTHCHECK probes {test[2]}: not 127.0.0.1 on an EXPOSEd port {sorted(s['expose'])}")
        for opt in ("interval", "timeout", "start-period"):
            if duration(hc["options"].get(opt, "")) is None:
                problem(where, f"HEALTHCHECK --{opt} missing or not a duration")
    return images


# ---------------------------------------------------------------- configuration


def port_of(where, address):
    host, _, port = address.rpartition(":")
    if host != "0.0.0.0":
        problem(where, f"{address}: a container's listener must be on 0.0.0.0 (else nothing outside reaches it)")
    return int(port)


def check_config(images):
    path = os.path.join(HERE, "hookline.toml")
    config = tomllib.loads(read(path))
    reference = tomllib.loads(read(os.path.join(ROOT, "deploy", "hookline.toml")))
    where = "deploy/container/hookline.toml"
    listens = {
        "edge": port_of(f"{where} edge.listen", config.get("edge", {}).get("listen", "127.0.0.1:8080")),
        "worker": port_of(f"{where} worker.listen", config.get("worker", {}).get("listen", "")),
        "console": port_of(f"{where} console.listen", config.get("console", {}).get("listen", "127.0.0.1:8070")),
    }
    if "api" in config:
        listens["api"] = port_of(f"{where} api.listen", config["api"].get("listen", ""))
    expose = {stage: images.get(stage, {}).get("expose", set()) for stage in STAGES}
    for key, stage in (("edge", "edge"), ("api", "edge"), ("worker", "worker"), ("console", "hookline")):
        if key in listens and listens[key] not in expose[stage]:
            problem(where, f"{key}.listen port {listens[key]} is not EXPOSEd by the {stage} image {sorted(expose[stage])}")
    # The images' HEALTHCHECKs probe the health listeners of the processes they run by default.
    for stage, key in (("edge", "edge"), ("worker", "worker"), ("hookline", "console")):
        hc = images.get(stage, {}).get("healthcheck")
        if hc and len(hc["test"]) == 3 and (urlsplit(hc["test"][2]).port, urlsplit(hc["test"][2]).path) != (listens[key], "/healthz"):
            problem(f"Containerfile stage {stage}",
                    f"HEALTHCHECK probes {hc['test'][2]}, {key}.listen is port {listens[key]} and liveness is /healthz")
    ref_providers = reference.get("providers", {})
    providers = config.get("providers", {})
    strip = lambda p: {k: v for k, v in p.items() if k != "api_base"}  # noqa: E731
    if {n: strip(p) for n, p in providers.items()} != {n: strip(p) for n, p in ref_providers.items()}:
        names = sorted(set(providers) | set(ref_providers))
        differ = [n for n in names if strip(providers.get(n, {})) != strip(ref_providers.get(n, {}))]
        problem(where, f"providers {differ} differ from deploy/hookline.toml's (only api_base may)")
    return config, listens


# ---------------------------------------------------------------- compose


def interpolate(where, value):
    """Compose's ${VAR:-default} / ${VAR-default} with the defaults (this check runs with no such variables)."""
    def sub(m):
        if m.group(2) is None:
            problem(where, f"${{{m.group(1)}}} has no default: the file must work as it is")
            return ""
        return m.group(3)
    return re.sub(r"\$\{(\w+)(:?-([^}]*))?\}", sub, value)


def env_vars(value):
    """The NAMEs of every "env:NAME" string value of the configuration."""
    if isinstance(value, dict):
        return set().union(*(env_vars(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(env_vars(v) for v in value))
    if isinstance(value, str) and value.startswith("env:"):
        return {value[4:]}
    return set()


def ports_of(where, service):
    published = {}
    for entry in service.get("ports", []) or []:
        if not isinstance(entry, str):
            problem(where, f"ports: use the short form \"127.0.0.1:HOST:CONTAINER\", not {entry}")
            continue
        parts = entry.split(":")
        if len(parts) != 3 or parts[0] != "127.0.0.1":
            problem(where, f"port {entry!r}: publish on 127.0.0.1 only (127.0.0.1:HOST:CONTAINER)")
            continue
        published[int(parts[2])] = int(parts[1])
    return published


def check_compose(images, config, listens):
    path = os.path.join(HERE, "compose.yaml")
    compose = yaml.safe_load(read(path))
    services = compose.get("services", {})
    expected = HOOKLINE_SERVICES | {"postgres", "rabbitmq"}
    if set(services) != expected:
        problem("compose.yaml", f"services are {sorted(services)}, expected {sorted(expected)}")
    pg = services.get("postgres", {}).get("environment", {})
    mq = services.get("rabbitmq", {}).get("environment", {})
    sandbox_port = None
    summary = []
    for name in sorted(HOOKLINE_SERVICES & set(services)):
        svc = services[name]
        where = f"compose.yaml services.{name}"
        build = svc.get("build", {})
        stage = build.get("target")
        image = interpolate(where + ".image", svc.get("image", ""))
        if stage not in STAGES:
            problem(where, f"build.target {stage!r} is not an image stage {sorted(STAGES)}")
            continue
        if not re.fullmatch(rf"[^ ]+/{STAGES[stage]}:[\w.-]+", image):
            problem(where, f"image {image!r} is not REGISTRY/{STAGES[stage]}:TAG (build target {stage})")
        if build.get("dockerfile") != "deploy/container/Containerfile" or \
                os.path.normpath(os.path.join(HERE, build.get("context", ""))) != ROOT:
            problem(where, "build must be context ../.. (the repository), dockerfile deploy/container/Containerfile")
        img = images.get(stage, {})
        argv = (img.get("entrypoint") or []) + (svc["command"] if "command" in svc else (img.get("cmd") or []))
        binary = os.path.basename(argv[0]) if argv else ""
        # What each service runs, and the listeners (container ports) that follow from it.
        if name == "migrate":
            ok, ports, health = argv[1:] == ["migrate"] and binary == "hookline", set(), None
        elif name == "edge":
            ok = argv[1:] == [] and binary == "hookline-edge"
            ports = {listens["edge"]} | ({listens["api"]} if "api" in listens else set())
            health = (listens["edge"], "/healthz")
        elif name == "worker":
            ok, ports, health = argv[1:] == [] and binary == "hookline-worker", {listens["worker"]}, (listens["worker"], "/healthz")
        elif name == "console":
            ok, ports = argv[1:] == ["console", "serve"] and binary == "hookline", {listens["console"]}
            health = (listens["console"], "/healthz")
        else:  # sandbox
            ok = binary == "hookline" and len(argv) == 4 and argv[1:3] == ["sandbox", "--listen"]
            sandbox_port = port_of(where + " command --listen", argv[3]) if ok else None
            ports, health = {sandbox_port}, (sandbox_port, "/_sandbox/health")
        if not ok:
            problem(where, f"runs {argv}: not what the {name} service is")
            continue
        published = ports_of(where, svc)
        if set(published) != ports:
            problem(where, f"publishes container ports {sorted(published)}, its listeners are {sorted(ports)}")
        for p in ports - img.get("expose", set()):
            problem(where, f"listens on {p}, which the {stage} image does not EXPOSE {sorted(img.get('expose', set()))}")
        hc = svc.get("healthcheck")
        if health is None:
            if not (hc and hc.get("disable") is True) or svc.get("restart") != "no":
                problem(where, "a one-shot job: healthcheck disable: true and restart: \"no\"")
        else:
            test = hc.get("test") if hc and "test" in hc else (img.get("healthcheck") or {}).get("test")
            want = ["CMD", PROBE, f"http://127.0.0.1:{health[0]}{health[1]}"]
            if test != want:
                problem(where, f"health check {test}, expected {want}")
        mounts = [interpolate(where, v) for v in svc.get("volumes", [])]
        config_path = img.get("env", {}).get("HOOKLINE_CONFIG")
        if f"./hookline.toml:{config_path}:ro" not in mounts:
            problem(where, f"does not mount ./hookline.toml read-only at {config_path} (HOOKLINE_CONFIG)")
        env = {k: interpolate(f"{where}.environment.{k}", str(v)) for k, v in (svc.get("environment") or {}).items()}
        for var in sorted(env_vars(config)):
            if var not in env:
                problem(where, f"the configuration reads env:{var}, which the service's environment lacks")
        db = urlsplit(env.get("DATABASE_URL", ""))
        pg_env = {k: interpolate("compose.yaml services.postgres", str(v)) for k, v in pg.items()}
        if (db.hostname, db.username, db.password, db.path) != (
                "postgres", pg_env.get("POSTGRES_USER"), pg_env.get("POSTGRES_PASSWORD"), "/" + str(pg_env.get("POSTGRES_DB"))):
            problem(where, "DATABASE_URL must name the postgres service with its POSTGRES_USER/PASSWORD/DB")
        mq_url = urlsplit(env.get("AMQP_URL", ""))
        mq_env = {k: interpolate("compose.yaml services.rabbitmq", str(v)) for k, v in mq.items()}
        if (mq_url.hostname, mq_url.username, mq_url.password) != (
                "rabbitmq", mq_env.get("RABBITMQ_DEFAULT_USER"), mq_env.get("RABBITMQ_DEFAULT_PASS")):
            problem(where, "AMQP_URL must name the rabbitmq service with its RABBITMQ_DEFAULT_USER/PASS")
        deps = svc.get("depends_on") or {}
        need = {"migrate": {"postgres": "service_healthy"},
                "edge": {"migrate": "service_completed_successfully", "rabbitmq": "service_healthy"},
                "worker": {"migrate": "service_completed_successfully", "rabbitmq": "service_healthy"},
                "console": {"migrate": "service_completed_successfully"}}.get(name, {})
        for dep, condition in need.items():
            if not isinstance(deps, dict) or (deps.get(dep) or {}).get("condition") != condition:
                problem(where, f"depends_on {dep} with condition {condition} missing")
        summary.append(f"{name}: {' '.join(argv)}; ports {sorted(ports) or '-'}; "
                       f"health {'disabled' if health is None else f'{health[0]}{health[1]}'}")
    # Whom the configuration sends to.
    edge_url = urlsplit(config.get("sandbox", {}).get("edge_url", ""))
    if (edge_url.hostname, edge_url.port) != ("edge", listens["edge"]):
        problem("deploy/container/hookline.toml", f"sandbox.edge_url must be http://edge:{listens['edge']}")
    for pname, provider in config.get("providers", {}).items():
        if "api_base" in provider:
            base = urlsplit(provider["api_base"])
            if (base.hostname, base.port) != ("sandbox", sandbox_port):
                problem("deploy/container/hookline.toml",
                        f"providers.{pname}.api_base must be http://sandbox:{sandbox_port} (the sandbox service)")
    for name in ("postgres", "rabbitmq"):
        if "healthcheck" not in services.get(name, {}):
            problem(f"compose.yaml services.{name}", "no healthcheck (the services wait for it)")
    return summary


# ---------------------------------------------------------------- built images


def check_images(images, directory):
    summary = []
    for stage, name in STAGES.items():
        where = f"image {name}"
        want = images.get(stage)
        if want is None:
            continue
        try:
            got = json.loads(read(os.path.join(directory, f"{name}.config.json")))
        except OSError as e:
            problem(where, f"no inspected configuration: {e}")
            continue
        if got.get("User") != want["user"]:
            problem(where, f"User {got.get('User')!r}, Containerfile says {want['user']!r}")
        if (got.get("Entrypoint") or []) != want["entrypoint"]:
            problem(where, f"Entrypoint {got.get('Entrypoint')}, Containerfile says {want['entrypoint']}")
        if (got.get("Cmd") or None) != want["cmd"]:
            problem(where, f"Cmd {got.get('Cmd')}, Containerfile says {want['cmd']}")
        exposed = {int(p.split("/")[0]) for p in (got.get("ExposedPorts") or {})}
        if exposed != want["expose"]:
            problem(where, f"ExposedPorts {sorted(exposed)}, Containerfile says {sorted(want['expose'])}")
        hc = got.get("Healthcheck") or {}
        if hc.get("Test") != want["healthcheck"]["test"]:
            problem(where, f"Healthcheck {hc.get('Test')} (built without --format docker?), Containerfile says "
                    f"{want['healthcheck']['test']}")
        for opt, key in (("interval", "Interval"), ("timeout", "Timeout"), ("start-period", "StartPeriod")):
            if hc.get(key) != duration(want["healthcheck"]["options"].get(opt, "")):
                problem(where, f"Healthcheck {key} {hc.get(key)}, Containerfile says {want['healthcheck']['options'].get(opt)}")
        env = dict(e.partition("=")[::2] for e in got.get("Env") or [])
        for k, v in want["env"].items():
            if env.get(k) != v:
                problem(where, f"Env {k}={env.get(k)!r}, Containerfile says {v!r}")
        for program in sorted(want["copies"]):
            path = os.path.join(directory, name, program.lstrip("/"))
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                problem(where, f"{program} missing or not executable in the exported filesystem")
        summary.append(f"{name}: user {got.get('User')}, {' '.join((got.get('Entrypoint') or []) + (got.get('Cmd') or []))}, "
                       f"exposes {sorted(exposed)}, HEALTHCHECK {hc.get('Test', [None, None, None])[2]}")
    return summary


def main():
    images = check_containerfiles()
    if len(sys.argv) == 3 and sys.argv[1] == "--images":
        summary = check_images(images, sys.argv[2])
    elif len(sys.argv) == 1:
        config, listens = check_config(images)
        summary = check_compose(images, config, listens) if not problems else []
    else:
        print(__doc__, file=sys.stderr)
        return 64
    if problems:
        for p in problems:
            print(f"check-compose: {p}", file=sys.stderr)
        return 1
    for line in summary:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
