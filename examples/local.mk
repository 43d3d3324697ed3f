# examples/local.mk - the examples (included from the top-level Makefile.am). Each checks
# what it computes and exits non-zero on a wrong result, 77 when it cannot run (cuda_stream
# without the CUDA runtime or a device). make builds them and make check runs them against
# the build tree; make installcheck (so make distcheck) builds and runs them against the
# installed prefix, with pkg-config and with CMake (examples/installcheck.sh).
EXTRA_DIST += examples/CMakeLists.txt examples/installcheck.sh
noinst_PROGRAMS += examples/hello examples/varlen_train examples/paged_decode \
	examples/cuda_stream
TESTS += examples/hello examples/varlen_train examples/paged_decode examples/cuda_stream
examples_hello_LDADD = libflashattn.la -lm
examples_varlen_train_LDADD = libflashattn.la -lm
examples_paged_decode_LDADD = libflashattn.la -lm
examples_cuda_stream_CPPFLAGS = $(AM_CPPFLAGS) $(FA_EXAMPLE_CUDA_CPPFLAGS)
examples_cuda_stream_LDADD = libflashattn.la $(FA_EXAMPLE_CUDA_LIBS) -lm

fa_installcheck_examples = CC="$(CC)" CMAKE="$(CMAKE)" CUDA_HOME="$(CUDA_HOME)" \
	EXAMPLE_CUDA_CPPFLAGS="$(FA_EXAMPLE_CUDA_CPPFLAGS)" EXAMPLE_CUDA_LIBS="$(FA_EXAMPLE_CUDA_LIBS)" \
	$(SHELL) $(srcdir)/examples/installcheck.sh
installcheck-local:
	$(fa_installcheck_examples) pkg-config $(srcdir) "$(DESTDIR)$(prefix)" \
	  "$(DESTDIR)$(libdir)" "$(abs_builddir)/installcheck-pkg-config"
	@if test -z "$(CMAKE)"; then \
	  echo "installcheck (cmake): FAIL: cmake not found by configure"; exit 1; fi
	$(fa_installcheck_examples) cmake $(srcdir) "$(DESTDIR)$(prefix)" \
	  "$(DESTDIR)$(libdir)" "$(abs_builddir)/installcheck-cmake"
