# Folders are layers, and no include runs upward (issue 46).
#
#   cmake [-DGT_ROOT=DIR] -P cmake/check_layers.cmake      (DIR: the source tree, by default ..)
#
# Reads every .h, .cc, .cu and .cuh file under the layer folders and include/graphtensor/, maps
# each `#include "a/b/c.h"` and `#include <graphtensor/d/c.h>` to the layer that holds the header,
# and fails with one line per violation:
#   file:line: <layer> includes <upper layer> (<header>)
# A file under framework/ but in none of its layer folders, or an include of such a path, is a
# violation too (framework/ holds layer folders only); so is one under include/graphtensor/ in no
# public layer folder. Includes that name no layer folder (system
# and library headers, an example's own "cli.h") are not checked. ctest runs this as `layers`,
# and `layers_detects_violation` runs it over tests/layers/fixture, whose planted upward includes
# it must report exactly. No Python: CI machines may lack it.
#
# GT_LAYERS is the one record of the layer order, lowest first. A file may include headers of its
# own layer and of the layers before it, never of a layer after it. Each folder's README.md says
# what it owns. kernels/ sits below framework/config/: kernels know tensors and blocks, never
# configs or models.
cmake_minimum_required(VERSION 3.25)

set(GT_LAYERS
  framework/core         # tensors, memory, devices, context, errors, RNG, files, JSON lines, trace
  kernels                # NAPA ops and their CPU/CUDA implementations
  framework/config       # the config structs, their keys and docs, YAML loading
  preprocess             # datasets, importers, sampling, reindexing, feature tables, the pipeline
  models                 # the DFG, layers, models and the DKP pass over the DFG
  framework/distributed  # communicators, process groups, peer watch, gradient reduction
  framework/train        # trainer, optimizers, checkpoints, evaluation, layer-wise inference
  framework/serve        # inference sessions
  examples               # the programs
  tests)                 # the test suites
# The public headers: include/graphtensor/<name>/ belongs to the layer after <name> (included as
# <graphtensor/<name>/x.h>); the umbrella include/graphtensor/graphtensor.h includes every public
# layer, so it belongs to the top one of the library, framework/serve. There is no public header
# of framework/distributed yet; its folder would be include/graphtensor/distributed/.
set(GT_PUBLIC_LAYERS
  core framework/core  kernels kernels  config framework/config  preprocess preprocess
  models models  distributed framework/distributed  train framework/train  serve framework/serve)
set(GT_UMBRELLA_LAYER framework/serve)
set(GT_LAYER_EXTENSIONS h cc cu cuh)
# Not checked: the test fixture, whose planted violations are for layers_detects_violation.
set(GT_LAYER_SKIP tests/layers/fixture/)

if(NOT DEFINED GT_ROOT)
  get_filename_component(GT_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
if(NOT IS_DIRECTORY "${GT_ROOT}")
  message(FATAL_ERROR "check_layers: GT_ROOT=${GT_ROOT} is not a directory")
endif()

# Rank of each layer, and the top folders whose includes are checked.
set(rank 0)
set(tops "")
foreach(layer IN LISTS GT_LAYERS)
  set(rank_${layer} ${rank})
  math(EXPR rank "${rank} + 1")
  string(REGEX REPLACE "/.*" "" top "${layer}")
  list(APPEND tops ${top})
endforeach()
list(APPEND tops include)
list(REMOVE_DUPLICATES tops)

# layer_of(<path> <out>): the layer holding path, "" when its top folder is a layered one but no
# layer holds it (framework/x.h), "-" when it names no layer folder at all (unchecked).
function(layer_of path out)
  if(path MATCHES "^include/graphtensor/(.*)$")
    set(rest "${CMAKE_MATCH_1}")
    if(rest STREQUAL "graphtensor.h")
      set(${out} "${GT_UMBRELLA_LAYER}" PARENT_SCOPE)
      return()
    endif()
    set(pairs ${GT_PUBLIC_LAYERS})
    while(pairs)
      list(POP_FRONT pairs name layer)
      if(rest MATCHES "^${name}/")
        set(${out} "${layer}" PARENT_SCOPE)
        return()
      endif()
    endwhile()
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  foreach(layer IN LISTS GT_LAYERS)
    string(LENGTH "${layer}/" n)
    string(SUBSTRING "${path}" 0 ${n} head)
    if(head STREQUAL "${layer}/")
      set(${out} "${layer}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  string(REGEX REPLACE "/.*" "" top "${path}")
  if(path MATCHES "/" AND top IN_LIST tops)
    set(${out} "" PARENT_SCOPE)
  else()
    set(${out} "-" PARENT_SCOPE)
  endif()
endfunction()

set(globs "")
foreach(top IN LISTS tops)
  foreach(ext IN LISTS GT_LAYER_EXTENSIONS)
    list(APPEND globs "${top}/*.${ext}")
  endforeach()
endforeach()
set(all_files "")
foreach(g IN LISTS globs)
  file(GLOB_RECURSE found RELATIVE "${GT_ROOT}" "${GT_ROOT}/${g}")
  list(APPEND all_files ${found})
endforeach()
list(REMOVE_DUPLICATES all_files)
list(SORT all_files)

set(violations "")
set(edges "")
set(n_includes 0)
foreach(skip IN LISTS GT_LAYER_SKIP)
  list(FILTER all_files EXCLUDE REGEX "^${skip}")
endforeach()
foreach(file IN LISTS all_files)
  layer_of("${file}" from)
  if(from STREQUAL "")
    list(APPEND violations "${file}:1: in no layer (move it into one of the layer folders)")
    continue()
  endif()
  file(READ "${GT_ROOT}/${file}" content)
  if(NOT content MATCHES "#[ \t]*include[ \t]*(\"|<graphtensor/)")
    continue()
  endif()
  # One list element per line: characters that CMake lists treat specially are masked first.
  string(REPLACE "\\" "/" content "${content}")
  string(REPLACE ";" "," content "${content}")
  string(REPLACE "[" "(" content "${content}")
  string(REPLACE "]" ")" content "${content}")
  string(REPLACE "\n" ";" lines "${content}")
  set(line_no 0)
  foreach(line IN LISTS lines)
    math(EXPR line_no "${line_no} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]+)[\">]")
      continue()
    endif()
    set(header "${CMAKE_MATCH_1}")
    # <graphtensor/...> (angle brackets or quotes) is a public header: include/graphtensor/...
    if(header MATCHES "^graphtensor/")
      layer_of("include/${header}" to)
    else()
      layer_of("${header}" to)
    endif()
    if(to STREQUAL "-")
      continue()
    endif()
    math(EXPR n_includes "${n_includes} + 1")
    if(to STREQUAL "")
      list(APPEND violations "${file}:${line_no}: ${from} includes a header in no layer (${header})")
    elseif(${rank_${to}} GREATER ${rank_${from}})
      list(APPEND violations "${file}:${line_no}: ${from} includes ${to} (${header})")
    elseif(NOT to STREQUAL from)
      list(APPEND edges "${from} -> ${to}")
    endif()
  endforeach()
endforeach()

list(LENGTH all_files n_files)
string(REPLACE ";" " < " order "${GT_LAYERS}")
if(violations)
  foreach(v IN LISTS violations)
    message(NOTICE "${v}")
  endforeach()
  list(LENGTH violations n)
  message(FATAL_ERROR "check_layers: ${n} violation(s) of the layer order ${order} "
                      "(cmake/check_layers.cmake; each folder's README.md says what it may include)")
endif()

# The include graph between layers (how many includes run along each edge), for the record.
list(SORT edges)
set(graph "")
set(previous "")
set(count 0)
foreach(e IN LISTS edges ITEMS "")
  if(NOT e STREQUAL previous)
    if(count GREATER 0)
      string(APPEND graph "  ${previous} (${count})\n")
    endif()
    set(previous "${e}")
    set(count 0)
  endif()
  math(EXPR count "${count} + 1")
endforeach()
message(STATUS "check_layers: ${n_files} files, ${n_includes} includes of layer headers, none upward\n"
               "  order: ${order}\n  include graph between layers (includes along each edge):\n${graph}")
