# Writes the bytes of IN as a C array into OUT: const unsigned char NAME[]
# (with a final NUL, not counted) and const size_t NAME_len. Run as
# cmake -DIN=.. -DOUT=.. -DNAME=.. -P embed.cmake, so a changed input
# rebuilds the array (the page served by the coordinator, built into it).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n"
  body "${body}")
file(WRITE "${OUT}.tmp"
  "/* Generated from ${NAME}'s source by cmake/embed.cmake: do not edit. */\n"
  "#include <stddef.h>\n\n"
  "const unsigned char ${NAME}[] = {\n${body}0x00};\n"
  "const size_t ${NAME}_len = ${bytes};\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
