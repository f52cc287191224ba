# The web dashboard's files (web/) and its charting library (uPlot, from npm
# into web/node_modules by scripts/setup.sh) copied to
# ${CMAKE_BINARY_DIR}/share/gpupool/web, where `gpupool server` finds them
# beside its binary (bin/../share/gpupool/web), and installed there too.
set(gpupool_web_out ${CMAKE_BINARY_DIR}/share/gpupool/web)
file(GLOB gpupool_web_files CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/web/*.html ${CMAKE_SOURCE_DIR}/web/*.js ${CMAKE_SOURCE_DIR}/web/*.css)
set(gpupool_uplot_dir ${CMAKE_SOURCE_DIR}/web/node_modules/uplot/dist)
set(gpupool_web_outputs "")
foreach(f ${gpupool_web_files})
  get_filename_component(name ${f} NAME)
  add_custom_command(OUTPUT ${gpupool_web_out}/${name}
                     COMMAND ${CMAKE_COMMAND} -E copy_if_different ${f} ${gpupool_web_out}/${name}
                     DEPENDS ${f})
  list(APPEND gpupool_web_outputs ${gpupool_web_out}/${name})
endforeach()
if(EXISTS ${gpupool_uplot_dir}/uPlot.iife.min.js)
  foreach(name uPlot.iife.min.js uPlot.min.css)
    add_custom_command(OUTPUT ${gpupool_web_out}/vendor/${name}
                       COMMAND ${CMAKE_COMMAND} -E copy_if_different ${gpupool_uplot_dir}/${name}
                               ${gpupool_web_out}/vendor/${name}
                       DEPENDS ${gpupool_uplot_dir}/${name})
    list(APPEND gpupool_web_outputs ${gpupool_web_out}/vendor/${name})
  endforeach()
elseif(gpupool_web_files)
  message(WARNING "web/node_modules/uplot is missing (scripts/setup.sh installs it): "
                  "the dashboard's charts will not draw")
endif()
add_custom_target(gpupool_web ALL DEPENDS ${gpupool_web_outputs})
install(DIRECTORY ${gpupool_web_out}/ DESTINATION share/gpupool/web OPTIONAL)
