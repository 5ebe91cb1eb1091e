/* gstsegtool.h: reading the class map that the segtoolseg element attaches to every
 * buffer it pushes, from C, through GStreamer's own custom-meta API (GStreamer 1.20+).
 * Header only: a program links GStreamer, not the plugin; the plugin registers the meta
 * when it loads (any pipeline with segtoolseg in it).
 *
 *   GstBuffer *buf = ...;  // from an appsink, a pad probe, a fakesink handoff
 *   GstSegtoolClassMap map;
 *   if (gst_segtool_class_map_read (buf, &map)) {
 *     guint8 id = map.ids[y * map.width + x];        // class at (x, y)
 *     guint64 road = gst_segtool_class_map_count (&map, 0);  // pixels of class 0
 *   }
 *
 * The meta's structure (named like the meta) has the fields width, height, classes
 * (guint), class-map (GBytes: width*height class ids, one byte each, row-major),
 * pixel-counts (GstValueArray of guint64, one per class) and frame (guint64).
 */
#ifndef GST_SEGTOOL_H
#define GST_SEGTOOL_H

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_SEGTOOL_META_NAME "SegtoolClassMapMeta"

/* A view of one buffer's class map; valid while the buffer is. */
typedef struct {
  guint width;
  guint height;
  guint classes;
  /* width * height class ids, row-major */
  const guint8 *ids;
  /* the element's frame index */
  guint64 frame;
  /* the meta's structure, for gst_segtool_class_map_count */
  const GstStructure *structure;
} GstSegtoolClassMap;

/* The meta's structure on buf, or NULL when it has none. */
static inline const GstStructure *
gst_segtool_meta_get_structure (GstBuffer * buf)
{
  GstCustomMeta *meta;
  if (!gst_meta_get_info (GST_SEGTOOL_META_NAME))
    return NULL;
  meta = gst_buffer_get_custom_meta (buf, GST_SEGTOOL_META_NAME);
  return meta ? gst_custom_meta_get_structure (meta) : NULL;
}

/* Fills map from buf's meta; FALSE when buf has none (or it is malformed). */
static inline gboolean
gst_segtool_class_map_read (GstBuffer * buf, GstSegtoolClassMap * map)
{
  const GstStructure *s = gst_segtool_meta_get_structure (buf);
  const GValue *bytes;
  GBytes *b;
  gsize size = 0;
  if (!s || !gst_structure_has_name (s, GST_SEGTOOL_META_NAME))
    return FALSE;
  if (!gst_structure_get_uint (s, "width", &map->width)
      || !gst_structure_get_uint (s, "height", &map->height)
      || !gst_structure_get_uint (s, "classes", &map->classes)
      || !gst_structure_get_uint64 (s, "frame", &map->frame))
    return FALSE;
  bytes = gst_structure_get_value (s, "class-map");
  if (!bytes || !G_VALUE_HOLDS (bytes, G_TYPE_BYTES))
    return FALSE;
  b = (GBytes *) g_value_get_boxed (bytes);
  map->ids = (const guint8 *) g_bytes_get_data (b, &size);
  if (size != (gsize) map->width * map->height)
    return FALSE;
  map->structure = s;
  return TRUE;
}

/* Pixels of class id in map (0 for ids outside the model's classes). */
static inline guint64
gst_segtool_class_map_count (const GstSegtoolClassMap * map, guint id)
{
  const GValue *counts = gst_structure_get_value (map->structure, "pixel-counts");
  if (!counts || !GST_VALUE_HOLDS_ARRAY (counts) || id >= gst_value_array_get_size (counts))
    return 0;
  return g_value_get_uint64 (gst_value_array_get_value (counts, id));
}

G_END_DECLS

#endif /* GST_SEGTOOL_H */
