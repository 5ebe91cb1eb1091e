/* gstsegtool.h: reading the class map that the segtoolseg element attaches to every
 * buffer it pushes, from C, through GStreamer's own custom-meta API (GStreamer 1.20+).
 * Header only: a program links GStreamer, not the plugin; the plugin registers the meta
 * when it loads (any pipeline with segtoolseg in it).
 *
 *   GstBuffer *buf = ...;  // from an appsink, a pad probe, a fakesink handoff
 *   GstSegtoolClassMap map;
 *   if (gst_segtool_class_map_read (buf, &map)) {
 *     guint id = gst_segtool_class_map_at (&map, x, y);  // class at (x, y)
 *     guint64 road = gst_segtool_class_map_count (&map, 0);  // pixels of class 0
 *   }
 *
 * The meta's structure (named like the meta) has the fields width, height, classes,
 * bits (guint; 8 for a model of at most 256 classes, 16 above), class-map (GBytes:
 * width*height class ids, row-major, one byte each, or a guint16 each in native byte
 * order when bits is 16), pixel-counts (GstValueArray of guint64, one per class) and
 * frame (guint64).
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
  /* bits per class id: 8 (ids set, ids16 NULL) or 16 (ids16 set, ids NULL) */
  guint bits;
  /* width * height class ids, row-major, for a model of at most 256 classes */
  const guint8 *ids;
  /* the same for a model of more than 256 classes */
  const guint16 *ids16;
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
  gconstpointer data;
  gsize size = 0;
  if (!s || !gst_structure_has_name (s, GST_SEGTOOL_META_NAME))
    return FALSE;
  if (!gst_structure_get_uint (s, "width", &map->width)
      || !gst_structure_get_uint (s, "height", &map->height)
      || !gst_structure_get_uint (s, "classes", &map->classes)
      || !gst_structure_get_uint (s, "bits", &map->bits)
      || !gst_structure_get_uint64 (s, "frame", &map->frame))
    return FALSE;
  if (map->bits != 8 && map->bits != 16)
    return FALSE;
  bytes = gst_structure_get_value (s, "class-map");
  if (!bytes || !G_VALUE_HOLDS (bytes, G_TYPE_BYTES))
    return FALSE;
  b = (GBytes *) g_value_get_boxed (bytes);
  data = g_bytes_get_data (b, &size);
  if (size != (gsize) map->width * map->height * (map->bits / 8))
    return FALSE;
  map->ids = map->bits == 8 ? (const guint8 *) data : NULL;
  map->ids16 = map->bits == 16 ? (const guint16 *) data : NULL;
  map->structure = s;
  return TRUE;
}

/* The class id at column x, row y of map (inside it), whatever its bits. */
static inline guint
gst_segtool_class_map_at (const GstSegtoolClassMap * map, guint x, guint y)
{
  gsize i = (gsize) y * map->width + x;
  return map->bits == 16 ? map->ids16[i] : map->ids[i];
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
