# Warnings for Plait's own targets: call plait_warnings(<target>).
function(plait_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow=local -Wno-unused-parameter -Werror=return-type>)
endfunction()
