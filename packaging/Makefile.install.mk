# `make install` / `make uninstall`: the by-hand installation (docs/installing.md).
# Included by the top-level Makefile. DESTDIR (staging root) and PREFIX aware:
#
#   make install                          PREFIX=/usr: the same paths as the RPM
#   make install DESTDIR=/tmp/stage       stage the tree (nothing is loaded or checked)
#   make install PREFIX=/usr/local        hook, profiles, man page under /usr/local; the
#                                         installed hooks.d file and config point there
#                                         (the hooks.d file stays in HOOKSDIR, below)
#
# The Python package is copied (no pip) into the site directory that the hook's interpreter
# (HOOK_PYTHON -I) reads for PREFIX: on Debian /usr/lib/python3/dist-packages for /usr and
# /usr/local/lib/python3.X/dist-packages for /usr/local. pip is not run, so PEP 668's
# "externally managed" marker (which guards pip) is neither triggered nor overridden: no
# pip metadata is written and pip does not manage these files; `make uninstall` removes them.
# The dependencies come from the distribution (Debian: apt-get install python3-click
# python3-yaml python3-jsonschema python3-selinux); `make install` says which
# are missing. The SELinux module is built and installed as a file; it is loaded
# (semodule -i) only when SELinux is enabled and DESTDIR is empty, else the step is printed.
# `ocihook check` reads TOML with tomllib; a HOOK_PYTHON without it (before 3.11: RHEL 9's 3.9)
# gets the tomli the RPM bundles, in ocihook/_vendor/tomli with its LICENSE: the wheel of the
# spec's version and sha256, fetched by packaging/fetch-tomli.sh with HOOK_PYTHON's pip into
# BUNDLE_DIR (offline: put the wheel there first).

HOOK_PYTHON ?= /usr/bin/python3
PREFIX ?= /usr
SYSCONFDIR ?= /etc
BINDIR ?= $(PREFIX)/bin
LIBEXECDIR ?= $(PREFIX)/libexec
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
ZSHCOMPDIR ?= $(DATADIR)/zsh/site-functions
RUNDIR ?= /run
# The one hooks dir that podman (root and rootless) and CRI-O both read by default, whatever
# PREFIX is: /etc/containers/oci/hooks.d is read by neither unless hooks_dir names it.
HOOKSDIR ?= /usr/share/containers/oci/hooks.d
PYTHON_SITEDIR ?= $(shell $(HOOK_PYTHON) -c "import sysconfig as s; n = s.get_scheme_names(); p = '$(PREFIX)'; \
	scheme = 'deb_system' if p == '/usr' and 'deb_system' in n else 'posix_local' if p == '/usr/local' and 'posix_local' in n else 'posix_prefix'; \
	base = '/usr' if scheme == 'posix_local' else p; \
	print(s.get_path('purelib', scheme, vars={'base': base, 'platbase': base}))")
INSTALL_DEPS := click yaml jsonschema
BUNDLE_DIR ?= $(CURDIR)/build/bundled
# The module is built in a copy (build/selinux): the checkout stays clean.
SELINUX_PP := build/selinux/ocihook.pp

.PHONY: install uninstall install-check

# A registration file, its paths moved to PREFIX, written through a dot file and a rename:
# CRI-O and podman watch their hooks dirs, and CRI-O logs a half-written file as invalid JSON
# ("unexpected end of JSON input") and skips it (the dot file: CRI-O reads only *.json).
define install_registration
sed 's|/usr/libexec/ocihook/ocihook-hook|$(LIBEXECDIR)/ocihook/ocihook-hook|; s|/etc/ocihook/|$(SYSCONFDIR)/ocihook/|' \
		$(1) > "$(dir $(2)).$(notdir $(2)).tmp"
	chmod 0644 "$(dir $(2)).$(notdir $(2)).tmp"
	mv -f "$(dir $(2)).$(notdir $(2)).tmp" "$(2)"
endef

install:
	@test -n "$(PYTHON_SITEDIR)" || { echo "install: $(HOOK_PYTHON) does not run" >&2; exit 1; }
	@echo "install: package -> $(DESTDIR)$(PYTHON_SITEDIR)/ocihook (copied, no pip: PEP 668's marker only guards pip)"
	rm -rf "$(DESTDIR)$(PYTHON_SITEDIR)/ocihook"
	find ocihook -name '*.py' -o -name '*.json' | while read -r f; do \
		install -D -m 0644 "$$f" "$(DESTDIR)$(PYTHON_SITEDIR)/$$f" || exit 1; done
	@if ! $(HOOK_PYTHON) -I -c "import tomllib" 2>/dev/null; then \
		echo "install: $(HOOK_PYTHON) has no tomllib: tomli bundled into ocihook/_vendor/tomli"; \
		wheel=$$(packaging/fetch-tomli.sh "$(BUNDLE_DIR)" "$(HOOK_PYTHON)") || exit 1; \
		rm -rf build/bundled-tomli && \
		$(HOOK_PYTHON) -I -m zipfile -e "$$wheel" build/bundled-tomli && \
		vendor="$(DESTDIR)$(PYTHON_SITEDIR)/ocihook/_vendor" && \
		install -d -m 0755 "$$vendor/tomli" && \
		install -m 0644 /dev/null "$$vendor/__init__.py" && \
		install -m 0644 build/bundled-tomli/tomli/*.py "$$vendor/tomli/" && \
		install -m 0644 build/bundled-tomli/tomli-*.dist-info/LICENSE "$$vendor/tomli/LICENSE" \
		|| exit 1; \
	fi
	$(HOOK_PYTHON) -m compileall -q -d "$(PYTHON_SITEDIR)/ocihook" "$(DESTDIR)$(PYTHON_SITEDIR)/ocihook"
	install -d -m 0755 "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(LIBEXECDIR)/ocihook"
	printf '#!%s -I\nimport sys\nfrom ocihook.cli.main import main\nsys.exit(main())\n' "$(HOOK_PYTHON)" \
		> "$(DESTDIR)$(BINDIR)/ocihook"
	chmod 0755 "$(DESTDIR)$(BINDIR)/ocihook"
	$(HOOK_PYTHON) -I packaging/hook_executable.py --python "$(HOOK_PYTHON)" \
		--package-dir "$(PYTHON_SITEDIR)" "$(DESTDIR)$(LIBEXECDIR)/ocihook/ocihook-hook"
	install -d -m 0755 "$(DESTDIR)$(HOOKSDIR)" "$(DESTDIR)$(DATADIR)/ocihook/examples"
	$(call install_registration,hooks.d/ocihook.json,$(DESTDIR)$(HOOKSDIR)/ocihook.json)
	$(call install_registration,hooks.d/ocihook-env.json,$(DESTDIR)$(DATADIR)/ocihook/examples/ocihook-env.json)
	install -d -m 0755 "$(DESTDIR)$(DATADIR)/ocihook/hooks.d.podman"
	$(call install_registration,hooks.d/ocihook-precreate.json,$(DESTDIR)$(DATADIR)/ocihook/hooks.d.podman/ocihook-precreate.json)
	install -m 0644 packaging/50-ocihook-precreate.conf "$(DESTDIR)$(DATADIR)/ocihook/examples/"
	chmod 0644 "$(DESTDIR)$(DATADIR)/ocihook/hooks.d.podman/ocihook-precreate.json"
	install -d -m 0755 "$(DESTDIR)$(SYSCONFDIR)/ocihook/profiles" "$(DESTDIR)$(DATADIR)/ocihook/profiles"
	install -m 0644 packaging/profiles/*.yaml "$(DESTDIR)$(DATADIR)/ocihook/profiles/"
	@if [ -e "$(DESTDIR)$(SYSCONFDIR)/ocihook/config.yaml" ]; then \
		echo "install: $(DESTDIR)$(SYSCONFDIR)/ocihook/config.yaml exists: kept (the shipped one is $(DATADIR)/ocihook/examples/config.yaml)"; \
	else \
		sed 's|/usr/share/ocihook/profiles|$(DATADIR)/ocihook/profiles|' packaging/config.yaml \
			> "$(DESTDIR)$(SYSCONFDIR)/ocihook/config.yaml" && \
		chmod 0644 "$(DESTDIR)$(SYSCONFDIR)/ocihook/config.yaml"; \
	fi
	sed 's|/usr/share/ocihook/profiles|$(DATADIR)/ocihook/profiles|' packaging/config.yaml \
		> "$(DESTDIR)$(DATADIR)/ocihook/examples/config.yaml"
	chmod 0644 "$(DESTDIR)$(DATADIR)/ocihook/examples/config.yaml"
	install -D -m 0644 packaging/ocihook.1 "$(DESTDIR)$(MANDIR)/man1/ocihook.1"
	@# Shell completion from the click that HOOK_PYTHON has (click 7 and 8 differ).
	@mkdir -p build/completion && \
	if $(HOOK_PYTHON) -m ocihook.cli.completion bash > build/completion/ocihook 2> build/completion/error && \
		$(HOOK_PYTHON) -m ocihook.cli.completion zsh > build/completion/_ocihook 2> build/completion/error; then \
		install -D -m 0644 build/completion/ocihook "$(DESTDIR)$(BASHCOMPDIR)/ocihook" && \
		install -D -m 0644 build/completion/_ocihook "$(DESTDIR)$(ZSHCOMPDIR)/_ocihook"; \
	else \
		echo "install: shell completion not installed: $(HOOK_PYTHON): $$(tail -n 1 build/completion/error)"; \
	fi
	install -D -m 0644 packaging/ocihook.tmpfiles "$(DESTDIR)$(TMPFILESDIR)/ocihook.conf"
	install -d -m 0700 "$(DESTDIR)$(RUNDIR)/ocihook"
	@rm -rf build/selinux && mkdir -p build && cp -r selinux build/selinux && \
	if $(MAKE) -s -C build/selinux >/dev/null 2>&1; then \
		install -D -m 0644 "$(SELINUX_PP)" "$(DESTDIR)$(DATADIR)/selinux/packages/ocihook.pp"; \
	else \
		echo "install: SELinux module not built (needs selinux-policy-dev or selinux-policy-devel): make -C selinux"; \
	fi
	@if [ -z "$(DESTDIR)" ]; then $(MAKE) -s install-check; fi

# After a real install: the interpreter finds the package, the deps are there, SELinux module.
install-check:
	@$(HOOK_PYTHON) -I -c "import ocihook, sys; f = ocihook.__file__; \
		sys.exit(0 if f.startswith('$(PYTHON_SITEDIR)/') else 'install: $(HOOK_PYTHON) -I imports ocihook from ' + f + ', not $(PYTHON_SITEDIR): remove that copy')" \
		|| exit 1
	@missing=""; for m in $(INSTALL_DEPS); do \
		$(HOOK_PYTHON) -I -c "import $$m" 2>/dev/null || missing="$$missing $$m"; done; \
	if [ -n "$$missing" ]; then \
		echo "install: $(HOOK_PYTHON) lacks:$$missing; on Debian: apt-get install python3-click python3-yaml python3-jsonschema python3-selinux" >&2; \
	fi
	@if [ -f "$(DATADIR)/selinux/packages/ocihook.pp" ]; then \
		if command -v selinuxenabled >/dev/null 2>&1 && selinuxenabled; then \
			echo "install: loading the SELinux module (semodule -i, takes a while)"; \
			semodule -i "$(DATADIR)/selinux/packages/ocihook.pp"; \
		else \
			echo "install: SELinux is not enabled: module left in $(DATADIR)/selinux/packages/ocihook.pp (load it with semodule -i when it is)"; \
		fi; \
	fi
	@$(HOOK_PYTHON) -I -c "from ocihook.check import tomlfile; tomlfile.reader()" 2>/dev/null || \
		echo "install: $(HOOK_PYTHON) -I finds no TOML reader (tomllib, ocihook._vendor.tomli, tomli): ocihook check cannot read containers.conf" >&2
	@echo "install: done; run: ocihook check"

uninstall:
	rm -rf "$(DESTDIR)$(PYTHON_SITEDIR)/ocihook"
	rm -f "$(DESTDIR)$(BINDIR)/ocihook" "$(DESTDIR)$(LIBEXECDIR)/ocihook/ocihook-hook"
	-rmdir "$(DESTDIR)$(LIBEXECDIR)/ocihook"
	rm -f "$(DESTDIR)$(HOOKSDIR)/ocihook.json" "$(DESTDIR)$(MANDIR)/man1/ocihook.1" \
		"$(DESTDIR)$(TMPFILESDIR)/ocihook.conf" \
		"$(DESTDIR)$(BASHCOMPDIR)/ocihook" "$(DESTDIR)$(ZSHCOMPDIR)/_ocihook"
	@if [ -z "$(DESTDIR)" ] && command -v semodule >/dev/null 2>&1 && command -v selinuxenabled >/dev/null 2>&1 \
		&& selinuxenabled && semodule -l 2>/dev/null | grep -qx ocihook; then semodule -r ocihook; fi
	rm -f "$(DESTDIR)$(DATADIR)/selinux/packages/ocihook.pp"
	@if [ -f "$(DESTDIR)$(SYSCONFDIR)/ocihook/config.yaml" ] && \
		cmp -s "$(DESTDIR)$(SYSCONFDIR)/ocihook/config.yaml" "$(DESTDIR)$(DATADIR)/ocihook/examples/config.yaml"; then \
		rm -f "$(DESTDIR)$(SYSCONFDIR)/ocihook/config.yaml"; \
	elif [ -f "$(DESTDIR)$(SYSCONFDIR)/ocihook/config.yaml" ]; then \
		echo "uninstall: $(DESTDIR)$(SYSCONFDIR)/ocihook/config.yaml was changed: kept"; \
	fi
	rm -rf "$(DESTDIR)$(DATADIR)/ocihook"
	-rmdir "$(DESTDIR)$(SYSCONFDIR)/ocihook/profiles" "$(DESTDIR)$(SYSCONFDIR)/ocihook" 2>/dev/null
	@echo "uninstall: done (records in $(RUNDIR)/ocihook are left: they go at reboot)"
