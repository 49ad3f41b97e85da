# `make rpm`: source tarball, SRPM and noarch RPMs (ocihook, ocihook-selinux) in build/rpm/.
# Included by the top-level Makefile:   include packaging/Makefile.rpm.mk
# Standalone:                           make -f Makefile -f packaging/Makefile.rpm.mk rpm
#
# The version is the one in ocihook/__init__.py (the spec gets it as ocihook_version).
# The tarball holds the committed tree plus uncommitted changes to tracked files
# (`git stash create`); untracked files never go in. Outside a git checkout: the tree itself.
# RPM_BUILD_FLAGS defaults to --nodeps where there is no RPM database of build
# dependencies (Debian: dpkg owns the packages); on Fedora/RHEL the BuildRequires are checked.
# RPMBUILD_ARGS: more rpmbuild options (macro files with --load, --define; the enforcing
# tier builds the Fedora guest's RPMs with RHEL's macros this way).
# RPM_PYTHON, when set, is the spec's %__python3: the interpreter that builds the wheel (its
# setuptools, no build isolation), installs it into its own site-packages layout and compiles
# the byte code, as RHEL's /usr/bin/python3 does there. `make rpm-rhel9` sets it to
# .venv-py39's python: RHEL 9's Python stack (docs/rpm.md).
# The spec's Source1, the tomli wheel bundled where Python has no tomllib, is fetched by
# packaging/fetch-tomli.sh (the spec's version and sha256, pip --require-hashes) with
# BUNDLE_PYTHON's pip into BUNDLE_DIR, where it is kept (offline: put the wheel there).

RPM_VERSION := $(shell sed -n 's/^__version__ = "\([^"]*\)"$$/\1/p' ocihook/__init__.py)
RPM_TOPDIR ?= $(CURDIR)/build/rpm
RPM_TARBALL := $(RPM_TOPDIR)/SOURCES/ocihook-$(RPM_VERSION).tar.gz
RPM_BUILD_FLAGS ?= $(if $(wildcard /usr/bin/dpkg),--nodeps,)
RPMBUILD_ARGS ?=
RPM_PYTHON ?=
BUNDLE_DIR ?= $(CURDIR)/build/bundled
BUNDLE_PYTHON ?= $(if $(RPM_PYTHON),$(RPM_PYTHON),python3)

.PHONY: rpm

rpm:
	@test -n "$(RPM_VERSION)" || { echo "rpm: no __version__ in ocihook/__init__.py" >&2; exit 1; }
	rm -rf $(RPM_TOPDIR)
	mkdir -p $(RPM_TOPDIR)/SOURCES $(RPM_TOPDIR)/SPECS
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		tree=$$(git stash create); \
		git archive --format=tar.gz --prefix=ocihook-$(RPM_VERSION)/ \
			-o $(RPM_TARBALL) $${tree:-HEAD}; \
	else \
		tar -czf $(RPM_TARBALL) --transform 's|^\./|ocihook-$(RPM_VERSION)/|' \
			--exclude=./build --exclude=./.venv --exclude=./.git --exclude='*.pyc' .; \
	fi
	wheel=$$(packaging/fetch-tomli.sh "$(BUNDLE_DIR)" "$(BUNDLE_PYTHON)") && \
		cp "$$wheel" $(RPM_TOPDIR)/SOURCES/
	cp packaging/ocihook.spec $(RPM_TOPDIR)/SPECS/
	rpmbuild -ba $(RPM_BUILD_FLAGS) $(RPMBUILD_ARGS) \
		--define "_topdir $(RPM_TOPDIR)" \
		--define "ocihook_version $(RPM_VERSION)" \
		$(if $(RPM_PYTHON),--define "__python3 $(abspath $(RPM_PYTHON))") \
		$(RPM_TOPDIR)/SPECS/ocihook.spec
	@find $(RPM_TOPDIR)/SRPMS $(RPM_TOPDIR)/RPMS -name '*.rpm' | sort
