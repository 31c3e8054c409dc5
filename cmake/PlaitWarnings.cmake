# Warnings for Plait's own targets: call plait_warnings(<target>).
# -Wshadow=local is GCC's (clang, used for tests/fuzz, has no such level).
function(plait_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra $<$<CXX_COMPILER_ID:GNU>:-Wshadow=local> -Wno-unused-parameter
                             -Werror=return-type>)
endfunction()
