/* Runs `videotestsrc ! segtoolseg ! fakesink` and prints, for every buffer the sink
 * gets, the class map read through include/gstsegtool.h:
 *   frame <index> <width>x<height> classes <k> counts <c0> <c1> ... sum_ok <0|1> first <id>
 * argv[1]: the pipeline description (ending in `fakesink name=sink`). */
#include <stdio.h>
#include <gst/gst.h>

#include "gstsegtool.h"

static void
on_handoff (GstElement * sink, GstBuffer * buf, GstPad * pad, gpointer user)
{
  GstSegtoolClassMap map;
  guint64 sum = 0, direct = 0;
  guint c;
  (void) sink;
  (void) pad;
  (void) user;
  if (!gst_segtool_class_map_read (buf, &map)) {
    printf ("no meta\n");
    return;
  }
  printf ("frame %" G_GUINT64_FORMAT " %ux%u classes %u counts", map.frame, map.width,
      map.height, map.classes);
  for (c = 0; c < map.classes; c++) {
    guint64 n = gst_segtool_class_map_count (&map, c);
    printf (" %" G_GUINT64_FORMAT, n);
    sum += n;
  }
  for (c = 0; c < map.width * map.height; c++)
    direct += gst_segtool_class_map_at (&map, c % map.width, c / map.width) == 0;
  printf (" sum_ok %d zeros_ok %d first %u\n", sum == (guint64) map.width * map.height,
      direct == gst_segtool_class_map_count (&map, 0), gst_segtool_class_map_at (&map, 0, 0));
}

int
main (int argc, char **argv)
{
  GstElement *pipeline, *sink;
  GstBus *bus;
  GstMessage *msg;
  GError *err = NULL;
  int rc = 0;
  gst_init (&argc, &argv);
  if (argc < 2)
    return 2;
  pipeline = gst_parse_launch (argv[1], &err);
  if (!pipeline) {
    fprintf (stderr, "parse: %s\n", err->message);
    return 2;
  }
  sink = gst_bin_get_by_name (GST_BIN (pipeline), "sink");
  g_object_set (sink, "signal-handoffs", TRUE, NULL);
  g_signal_connect (sink, "handoff", G_CALLBACK (on_handoff), NULL);
  gst_element_set_state (pipeline, GST_STATE_PLAYING);
  bus = gst_element_get_bus (pipeline);
  msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND, GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  if (!msg || GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    fprintf (stderr, "pipeline failed\n");
    rc = 1;
  }
  if (msg)
    gst_message_unref (msg);
  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (sink);
  gst_object_unref (pipeline);
  return rc;
}
