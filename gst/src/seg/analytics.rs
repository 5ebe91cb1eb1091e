//! GStreamer 1.26's standard segmentation meta: with the `analytics` feature, each output
//! buffer also carries a `GstAnalyticsRelationMeta` holding one semantic
//! `GstAnalyticsSegmentationMtd` (the class map as a GRAY8 buffer with a `GstVideoMeta`,
//! region ids = class ids `0..classes`), which `segmentationoverlay` and other 1.26
//! analytics elements read. Needs GStreamer 1.26 (libgstanalytics-1.0 with the
//! segmentation API); Debian 12 has 1.22, so it is not built by default.

use gst::glib::translate::IntoGlibPtr;
use gst_analytics::ffi;

/// Attaches the class map `ids` (GRAY8 for a model of at most 256 classes, GRAY16_LE
/// above).
pub fn attach(
    outbuf: &mut gst::BufferRef,
    ids: &segtool_runtime::ClassMap,
    classes: u32,
) -> Result<(), String> {
    let (height, width) = ids.dim();
    let (width, height) = (width as u32, height as u32);
    let format = match ids.bits() {
        8 => gst_video::VideoFormat::Gray8,
        _ => gst_video::VideoFormat::Gray16Le,
    };
    let mut mask = gst::Buffer::from_mut_slice(ids.to_le_bytes());
    gst_video::VideoMeta::add(
        mask.get_mut().expect("new buffer"),
        gst_video::VideoFrameFlags::empty(),
        format,
        width,
        height,
    )
    .map_err(|e| format!("video meta of the segmentation mask: {e}"))?;
    let mut region_ids: Vec<u32> = (0..classes).collect();
    // SAFETY: `outbuf` is writable (we are building it); the relation meta is owned by
    // it; the mask buffer is handed over (transfer full) and `region_ids` is copied.
    unsafe {
        let meta = ffi::gst_buffer_add_analytics_relation_meta(outbuf.as_mut_ptr());
        if meta.is_null() {
            return Err("could not add a GstAnalyticsRelationMeta".into());
        }
        let mut mtd = std::mem::MaybeUninit::<ffi::GstAnalyticsSegmentationMtd>::zeroed();
        let ok = ffi::gst_analytics_relation_meta_add_segmentation_mtd(
            meta,
            mask.into_glib_ptr(),
            ffi::GST_SEGMENTATION_TYPE_SEMANTIC,
            region_ids.len(),
            region_ids.as_mut_ptr(),
            0,
            0,
            width,
            height,
            mtd.as_mut_ptr(),
        );
        if ok == 0 {
            return Err("could not add the GstAnalyticsSegmentationMtd".into());
        }
    }
    Ok(())
}
