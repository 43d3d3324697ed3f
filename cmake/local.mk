# cmake/local.mk - the CMake package (included from the top-level Makefile.am):
# find_package(flashattn) -> the imported target flashattn::flashattn. The two files are
# made from their .in at make time, when libdir and includedir are fully known: each is
# written relative to the prefix when it lies under it (so the installed tree can move),
# else as an absolute path.
cmakedir = $(libdir)/cmake/flashattn
cmake_DATA = cmake/flashattnConfig.cmake cmake/flashattnConfigVersion.cmake
EXTRA_DIST += cmake/flashattnConfig.cmake.in cmake/flashattnConfigVersion.cmake.in
CLEANFILES += $(cmake_DATA)

fa_cmake_subst = sed -e 's|[@]PACKAGE_VERSION[@]|$(PACKAGE_VERSION)|g' \
	-e 's|[@]HWLOC_LIBS[@]|$(HWLOC_LIBS)|g' -e 's|[@]OPENMP_CFLAGS[@]|$(OPENMP_CFLAGS)|g' \
	-e 's|[@]PTHREAD_LIBS[@]|$(PTHREAD_LIBS)|g' -e 's|[@]LIBS[@]|$(LIBS)|g' \
	-e 's|[@]FA_SIZEOF_VOID_P[@]|$(FA_SIZEOF_VOID_P)|g'

cmake/flashattnConfig.cmake: $(srcdir)/cmake/flashattnConfig.cmake.in Makefile
	$(AM_V_GEN)$(MKDIR_P) cmake && \
	rel() { case "$$1" in "$(prefix)"/*) echo "$${1#$(prefix)/}";; *) echo "$$1";; esac; }; \
	lib=`rel "$(libdir)"`; inc=`rel "$(includedir)"`; \
	case "$$lib" in /*) up=.; inc="$(includedir)";; *) up=`echo "$$lib/cmake/flashattn" | sed 's|[^/][^/]*|..|g'`;; esac; \
	$(fa_cmake_subst) -e "s|[@]FA_CMAKE_UP[@]|$$up|" -e "s|[@]FA_CMAKE_LIBDIR[@]|$$lib|" \
	  -e "s|[@]FA_CMAKE_INCLUDEDIR[@]|$$inc|" $(srcdir)/cmake/flashattnConfig.cmake.in > $@-t && \
	mv $@-t $@

cmake/flashattnConfigVersion.cmake: $(srcdir)/cmake/flashattnConfigVersion.cmake.in Makefile
	$(AM_V_GEN)$(MKDIR_P) cmake && \
	$(fa_cmake_subst) $(srcdir)/cmake/flashattnConfigVersion.cmake.in > $@-t && mv $@-t $@
