# fa_macros.m4 - small configure helpers of flashattn's own.

# FA_CHECK_CFLAG(FLAGS, [ACTION-IF-OK], [ACTION-IF-NOT])
# Does the C compiler accept FLAGS (with warnings as errors)?
AC_DEFUN([FA_CHECK_CFLAG], [
  AS_VAR_PUSHDEF([fa_cv], [fa_cv_cflag_$1])
  AC_CACHE_CHECK([whether $CC accepts $1], [fa_cv], [
    fa_save_CFLAGS=$CFLAGS
    CFLAGS="$CFLAGS $1 -Werror"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])], [AS_VAR_SET([fa_cv], [yes])], [AS_VAR_SET([fa_cv], [no])])
    CFLAGS=$fa_save_CFLAGS])
  AS_VAR_IF([fa_cv], [yes], [$2], [$3])
  AS_VAR_POPDEF([fa_cv])
])

# AX_PTHREAD_LITE: link with -pthread when the compiler knows it.
AC_DEFUN([AX_PTHREAD_LITE], [
  FA_CHECK_CFLAG([-pthread], [PTHREAD_CFLAGS=-pthread; PTHREAD_LIBS=-pthread], [PTHREAD_CFLAGS=; PTHREAD_LIBS=])
  AC_SUBST([PTHREAD_CFLAGS])
  AC_SUBST([PTHREAD_LIBS])
])
